package interop;

import com.netflix.appinfo.ApplicationInfoManager;
import com.netflix.appinfo.InstanceInfo;
import com.netflix.discovery.AbstractDiscoveryClientOptionalArgs;
import com.netflix.discovery.DiscoveryClient;
import com.netflix.discovery.EurekaClientConfig;
import com.netflix.discovery.EurekaEventListener;
import com.netflix.discovery.shared.transport.TransportClientFactory;
import com.netflix.discovery.shared.transport.jersey.Jersey1DiscoveryClientOptionalArgs;
import com.netflix.discovery.shared.transport.jersey.Jersey1TransportClientFactories;
import com.sun.jersey.api.client.filter.ClientFilter;

import java.util.Collection;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import javax.net.ssl.HostnameVerifier;
import javax.net.ssl.SSLContext;

/**
 * eureka-client 1.10.x as an application gets it by default: {@code DiscoveryClient} falls back to
 * {@link Jersey1TransportClientFactories} (Jersey 1 over Apache HttpClient 4) when no transport is
 * given. Here that same class is given explicitly, only to put {@link RecordingEurekaHttpClient}
 * around the clients it makes; and the Jersey 1 client gets one additional filter (the optional
 * args' standard hook), {@link WireRecordingFilter}, which reports what goes over the wire.
 */
final class ClientTransport {

    static final String NAME = "jersey1";

    private ClientTransport() {
    }

    static DiscoveryClient newDiscoveryClient(ApplicationInfoManager manager, EurekaClientConfig config,
                                              Set<EurekaEventListener> listeners) {
        AbstractDiscoveryClientOptionalArgs<ClientFilter> args = new Jersey1DiscoveryClientOptionalArgs();
        args.setEventListeners(listeners);
        args.setAdditionalFilters(List.of(new WireRecordingFilter()));
        args.setTransportClientFactories(new Recording());
        return new DiscoveryClient(manager, config, args);
    }

    /** Netflix's Jersey 1 factories, unchanged, whose clients report each call. */
    private static final class Recording extends Jersey1TransportClientFactories {
        @Override
        public TransportClientFactory newTransportClientFactory(EurekaClientConfig clientConfig,
                                                               Collection<ClientFilter> filters,
                                                               InstanceInfo myInstanceInfo,
                                                               Optional<SSLContext> sslContext,
                                                               Optional<HostnameVerifier> hostnameVerifier) {
            TransportClientFactory jersey1 = super.newTransportClientFactory(
                    clientConfig, filters, myInstanceInfo, sslContext, hostnameVerifier);
            return RecordingEurekaHttpClient.wrap(jersey1);
        }
    }
}
