package interop;

import com.fasterxml.jackson.databind.node.ObjectNode;
import com.netflix.appinfo.InstanceInfo;
import com.netflix.discovery.EurekaClientConfig;
import com.netflix.discovery.shared.Application;
import com.netflix.discovery.shared.Applications;
import com.netflix.discovery.shared.resolver.EurekaEndpoint;
import com.netflix.discovery.shared.transport.EurekaHttpClient;
import com.netflix.discovery.shared.transport.EurekaHttpResponse;
import com.netflix.discovery.shared.transport.TransportClientFactory;
import com.netflix.discovery.shared.transport.decorator.EurekaHttpClientDecorator;
import com.netflix.discovery.shared.transport.jersey.TransportClientFactories;
import com.netflix.discovery.shared.transport.jersey3.Jersey3TransportClientFactories;
import jakarta.ws.rs.client.ClientRequestFilter;

import java.util.Collection;
import java.util.Optional;
import javax.net.ssl.HostnameVerifier;
import javax.net.ssl.SSLContext;

/**
 * Netflix's Jersey 3 transport, unchanged, with a pass-through decorator that reports every call the
 * client makes (and what it made of the answer) as an {@code http} JSON line. It sits where Netflix's
 * own MetricsCollectingEurekaHttpClient sits: under the retrying / redirecting / session decorators.
 */
final class RecordingTransportClientFactories implements TransportClientFactories<ClientRequestFilter> {

    private final Jersey3TransportClientFactories delegate = Jersey3TransportClientFactories.getInstance();

    @Override
    public TransportClientFactory newTransportClientFactory(EurekaClientConfig clientConfig,
                                                           Collection<ClientRequestFilter> additionalFilters,
                                                           InstanceInfo myInstanceInfo) {
        return wrap(delegate.newTransportClientFactory(clientConfig, additionalFilters, myInstanceInfo));
    }

    @Override
    public TransportClientFactory newTransportClientFactory(EurekaClientConfig clientConfig,
                                                           Collection<ClientRequestFilter> additionalFilters,
                                                           InstanceInfo myInstanceInfo,
                                                           Optional<SSLContext> sslContext,
                                                           Optional<HostnameVerifier> hostnameVerifier) {
        return wrap(delegate.newTransportClientFactory(
                clientConfig, additionalFilters, myInstanceInfo, sslContext, hostnameVerifier));
    }

    private static TransportClientFactory wrap(TransportClientFactory factory) {
        return new TransportClientFactory() {
            @Override
            public EurekaHttpClient newClient(EurekaEndpoint serviceUrl) {
                return new Recording(factory.newClient(serviceUrl));
            }

            @Override
            public void shutdown() {
                factory.shutdown();
            }
        };
    }

    private static final class Recording extends EurekaHttpClientDecorator {
        private final EurekaHttpClient target;

        Recording(EurekaHttpClient target) {
            this.target = target;
        }

        @Override
        protected <R> EurekaHttpResponse<R> execute(RequestExecutor<R> requestExecutor) {
            ObjectNode out = EurekaInterop.event("http");
            out.put("op", requestExecutor.getRequestType().name());
            try {
                EurekaHttpResponse<R> response = requestExecutor.execute(target);
                out.put("status", response.getStatusCode());
                Object entity = response.getEntity();
                out.put("entity", entity != null);
                if (entity instanceof Applications) {
                    Applications apps = (Applications) entity;
                    out.put("appsHashcode", apps.getAppsHashCode());
                    out.put("version", apps.getVersion());
                    int instances = 0;
                    for (Application application : apps.getRegisteredApplications()) {
                        instances += application.getInstancesAsIsFromEureka().size();
                    }
                    out.put("instances", instances);
                } else if (entity instanceof InstanceInfo) {
                    out.set("instance", EurekaInterop.describe((InstanceInfo) entity));
                }
                EurekaInterop.emit(out);
                return response;
            } catch (RuntimeException e) {
                out.put("error", e.toString());
                Throwable cause = e.getCause();
                if (cause != null) {
                    out.put("cause", cause.toString());
                }
                EurekaInterop.emit(out);
                throw e;
            }
        }

        @Override
        public void shutdown() {
            target.shutdown();
        }
    }
}
