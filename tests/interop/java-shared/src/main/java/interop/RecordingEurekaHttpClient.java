package interop;

import com.fasterxml.jackson.databind.node.ObjectNode;
import com.netflix.appinfo.InstanceInfo;
import com.netflix.discovery.shared.Applications;
import com.netflix.discovery.shared.resolver.EurekaEndpoint;
import com.netflix.discovery.shared.transport.EurekaHttpClient;
import com.netflix.discovery.shared.transport.EurekaHttpResponse;
import com.netflix.discovery.shared.transport.TransportClientFactory;
import com.netflix.discovery.shared.transport.decorator.EurekaHttpClientDecorator;

/**
 * A pass-through decorator that reports every call the client makes (and what it made of the answer)
 * as an {@code http} JSON line. Each generation's {@link ClientTransport} puts it around its Jersey
 * transport, where Netflix's own MetricsCollectingEurekaHttpClient sits: under the retrying /
 * redirecting / session decorators. The decorator API is the same in eureka-client 1.10.x and 2.0.x.
 */
final class RecordingEurekaHttpClient extends EurekaHttpClientDecorator {

    private final EurekaHttpClient target;

    private RecordingEurekaHttpClient(EurekaHttpClient target) {
        this.target = target;
    }

    /** The transport's clients, each wrapped in a recorder. */
    static TransportClientFactory wrap(TransportClientFactory factory) {
        return new TransportClientFactory() {
            @Override
            public EurekaHttpClient newClient(EurekaEndpoint serviceUrl) {
                return new RecordingEurekaHttpClient(factory.newClient(serviceUrl));
            }

            @Override
            public void shutdown() {
                factory.shutdown();
            }
        };
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
                out.put("instances", EurekaInterop.countInstances(apps));
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
