package interop;

import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.jersey.api.client.ClientHandler;
import com.sun.jersey.api.client.ClientRequest;
import com.sun.jersey.api.client.ClientResponse;
import com.sun.jersey.api.client.filter.ClientFilter;
import com.sun.jersey.client.apache4.ApacheHttpClient4Handler;
import org.apache.http.Header;
import org.apache.http.HttpConnection;
import org.apache.http.HttpInetConnection;
import org.apache.http.HttpRequest;
import org.apache.http.HttpResponse;
import org.apache.http.client.HttpClient;
import org.apache.http.impl.client.AbstractHttpClient;
import org.apache.http.protocol.HttpContext;
import org.apache.http.protocol.HttpCoreContext;

import java.net.URI;

/**
 * Shows what the Jersey 1 transport puts on the wire. A Jersey filter only sees the request before
 * Jersey's Apache handler turns it into an HTTP message (framing headers such as Transfer-Encoding
 * and Content-Length are added by Apache HttpClient's own protocol interceptors). So on its first
 * request this filter walks down the filter chain to Jersey's {@link ApacheHttpClient4Handler} and
 * appends a response interceptor to its Apache client: it runs after the request was written with
 * every header HttpClient sent, and once the status line has been read; it prints one {@code wire}
 * line with both, and the local port of the connection that carried them.
 */
final class WireRecordingFilter extends ClientFilter {

    private volatile boolean installed;

    @Override
    public ClientResponse handle(ClientRequest request) {
        if (!installed) {
            install();
        }
        return getNext().handle(request);
    }

    private synchronized void install() {
        if (installed) {
            return;
        }
        installed = true;
        ClientHandler handler = getNext();
        while (handler instanceof ClientFilter) {
            handler = ((ClientFilter) handler).getNext();
        }
        HttpClient http = handler instanceof ApacheHttpClient4Handler
                ? ((ApacheHttpClient4Handler) handler).getHttpClient()
                : null;
        if (http instanceof AbstractHttpClient) {
            ((AbstractHttpClient) http).addResponseInterceptor(WireRecordingFilter::report);
        } else {
            ObjectNode error = EurekaInterop.event("error");
            error.put("message", "no Apache HttpClient under the Jersey 1 client: " + handler + " / " + http);
            EurekaInterop.emit(error);
        }
    }

    private static void report(HttpResponse response, HttpContext context) {
        HttpCoreContext core = HttpCoreContext.adapt(context);
        HttpRequest request = core.getRequest();
        ObjectNode out = EurekaInterop.event("wire");
        // Which connection (its local port) carried the exchange: shows keep-alive reuse.
        HttpConnection connection = core.getConnection();
        if (connection instanceof HttpInetConnection) {
            out.put("localPort", ((HttpInetConnection) connection).getLocalPort());
        }
        if (request != null) {
            URI uri = URI.create(request.getRequestLine().getUri());
            out.put("method", request.getRequestLine().getMethod());
            out.put("path", uri.getRawPath());
            out.put("query", uri.getRawQuery() == null ? "" : uri.getRawQuery());
            out.put("protocol", request.getRequestLine().getProtocolVersion().toString());
            ObjectNode headers = out.putObject("headers");
            for (Header header : request.getAllHeaders()) {
                String previous = headers.path(header.getName()).asText(null);
                headers.put(header.getName(), previous == null ? header.getValue() : previous + ", " + header.getValue());
            }
        }
        out.put("status", response.getStatusLine().getStatusCode());
        EurekaInterop.emit(out);
    }
}
