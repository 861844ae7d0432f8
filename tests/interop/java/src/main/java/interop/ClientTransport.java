package interop;

import com.netflix.appinfo.ApplicationInfoManager;
import com.netflix.appinfo.InstanceInfo;
import com.netflix.discovery.DiscoveryClient;
import com.netflix.discovery.EurekaClientConfig;
import com.netflix.discovery.EurekaEventListener;
import com.netflix.discovery.Jersey3DiscoveryClientOptionalArgs;
import com.netflix.discovery.shared.transport.TransportClientFactory;
import com.netflix.discovery.shared.transport.jersey3.Jersey3TransportClientFactories;
import jakarta.ws.rs.client.ClientRequestFilter;

import java.util.Collection;
import java.util.Optional;
import java.util.Set;
import javax.net.ssl.HostnameVerifier;
import javax.net.ssl.SSLContext;

/**
 * eureka-client 2.x ships no HTTP transport of its own: like Netflix's eureka-examples, the program
 * hands {@code DiscoveryClient} the Jersey 3 one ({@code eureka-client-jersey3}), whose clients are
 * wrapped in {@link RecordingEurekaHttpClient}.
 */
final class ClientTransport {

    static final String NAME = "jersey3";

    private ClientTransport() {
    }

    static DiscoveryClient newDiscoveryClient(ApplicationInfoManager manager, EurekaClientConfig config,
                                              Set<EurekaEventListener> listeners) {
        Jersey3DiscoveryClientOptionalArgs args = new Jersey3DiscoveryClientOptionalArgs();
        args.setEventListeners(listeners);
        return new DiscoveryClient(manager, config, new Recording(), args);
    }

    /** Netflix's Jersey 3 factories, unchanged, whose clients report each call. */
    private static final class Recording extends Jersey3TransportClientFactories {
        @Override
        public TransportClientFactory newTransportClientFactory(EurekaClientConfig clientConfig,
                                                               Collection<ClientRequestFilter> filters,
                                                               InstanceInfo info,
                                                               Optional<SSLContext> ssl,
                                                               Optional<HostnameVerifier> verifier) {
            return RecordingEurekaHttpClient.wrap(
                    super.newTransportClientFactory(clientConfig, filters, info, ssl, verifier));
        }
    }
}
