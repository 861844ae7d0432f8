package interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.netflix.appinfo.ApplicationInfoManager;
import com.netflix.appinfo.InstanceInfo;
import com.netflix.appinfo.InstanceInfo.InstanceStatus;
import com.netflix.appinfo.MyDataCenterInstanceConfig;
import com.netflix.appinfo.providers.EurekaConfigBasedInstanceInfoProvider;
import com.netflix.discovery.CacheRefreshedEvent;
import com.netflix.discovery.DefaultEurekaClientConfig;
import com.netflix.discovery.DiscoveryClient;
import com.netflix.discovery.EurekaEventListener;
import com.netflix.discovery.StatusChangeEvent;
import com.netflix.discovery.shared.Application;
import com.netflix.discovery.shared.Applications;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * A command-line Eureka application built on the real Netflix eureka-client, for the interop suite.
 * The same source serves both client generations (it is shared by tests/interop/java, eureka-client
 * 2.0.x with Jersey 3, and tests/interop/java1, 1.10.x with its default Jersey 1 transport): each
 * project supplies {@link ClientTransport}, which builds the DiscoveryClient the way its generation does.
 *
 * <pre>
 * java -cp ... interop.EurekaInterop ROLE SERVICE_URL [APP PORT [VIP]]
 *   ROLE service   registers APP (instance id 127.0.0.1:app:PORT), heartbeats, fetches the registry
 *   ROLE consumer  fetch-only: no registration
 * </pre>
 *
 * It prints one JSON object a line on stdout (the client's own log lines, from slf4j-simple, are
 * interleaved as plain text): {@code ready}, {@code http} (every call the transport makes, with the
 * status and what came back), {@code cacheRefreshed} (after each registry fetch, with the client's
 * reconcile hashcode), {@code statusChange} (this instance's status as seen in the fetched registry),
 * {@code wire} (the 1.x project only: each request's method, path and headers as its Apache connection
 * wrote them, and the status line it read), and the replies to commands read from stdin, one JSON
 * object a line:
 * <ul>
 *   <li>{@code {"cmd":"state","id":1,"apps":["APP"],"vips":["vip"],"picks":10}}: the local registry;
 *   with {@code "region":"us-west"} also that remote region's registry as the client keeps it apart
 *   (a client run with {@code -Deureka.fetchRemoteRegionsRegistry=us-west}): {@code regionApps}, each app's
 *   instance ids from getApplicationsForARegion, and {@code regionVips}, getInstancesByVipAddress(vip,
 *   false, region) for each of {@code vips};</li>
 *   <li>{@code {"cmd":"metadata","id":2,"entries":{"k":"v"}}}: ApplicationInfoManager.registerAppMetadata;</li>
 *   <li>{@code {"cmd":"status","id":3,"value":"UP"}}: ApplicationInfoManager.setInstanceStatus;</li>
 *   <li>{@code {"cmd":"shutdown","id":4}}: DiscoveryClient.shutdown() (cancels the instance), then exit.</li>
 * </ul>
 * End of stdin also shuts the client down.
 */
public final class EurekaInterop {

    static final ObjectMapper JSON = new ObjectMapper();
    private static final Object OUT_LOCK = new Object();

    private EurekaInterop() {
    }

    /** Print one event as a JSON line (System.out is shared with slf4j-simple, one line per call). */
    static void emit(ObjectNode event) {
        event.put("t", System.currentTimeMillis());
        String line;
        try {
            line = JSON.writeValueAsString(event);
        } catch (Exception e) {
            line = "{\"event\":\"error\",\"message\":\"cannot encode an event\"}";
        }
        synchronized (OUT_LOCK) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static ObjectNode event(String name) {
        ObjectNode node = JSON.createObjectNode();
        node.put("event", name);
        return node;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2 || !(args[0].equals("service") || args[0].equals("consumer"))) {
            System.err.println("usage: EurekaInterop service|consumer SERVICE_URL [APP PORT [VIP]]");
            System.exit(2);
        }
        String role = args[0];
        boolean register = role.equals("service");
        String serviceUrl = args[1];
        String app = args.length > 2 ? args[2] : "javaconsumer";
        int port = args.length > 3 ? Integer.parseInt(args[3]) : 8080;
        String vip = args.length > 4 ? args[4] : app.toLowerCase() + ".vip";
        String instanceId = "127.0.0.1:" + app.toLowerCase() + ":" + port;

        // Per-run settings as system properties, set before Archaius reads its configuration; the fixed
        // fast intervals come from eureka-client.properties on the classpath.
        setDefault("eureka.serviceUrl.default", serviceUrl);
        setDefault("eureka.registration.enabled", String.valueOf(register));
        setDefault("eureka.name", app);
        setDefault("eureka.vipAddress", vip);
        setDefault("eureka.secureVipAddress", vip);
        setDefault("eureka.port", String.valueOf(port));
        setDefault("eureka.instanceId", instanceId);
        setDefault("eureka.metadata.started.by", "java-interop");

        MyDataCenterInstanceConfig instanceConfig = new MyDataCenterInstanceConfig() {
            // Loopback only: advertise 127.0.0.1 rather than whatever the machine resolves.
            @Override
            public String getHostName(boolean refresh) {
                return "127.0.0.1";
            }

            @Override
            public String getIpAddress() {
                return "127.0.0.1";
            }
        };
        InstanceInfo instanceInfo = new EurekaConfigBasedInstanceInfoProvider(instanceConfig).get();
        ApplicationInfoManager manager = new ApplicationInfoManager(instanceConfig, instanceInfo);

        final DiscoveryClient[] holder = new DiscoveryClient[1];
        EurekaEventListener listener = (com.netflix.discovery.EurekaEvent e) -> {
            if (e instanceof CacheRefreshedEvent) {
                ObjectNode out = event("cacheRefreshed");
                DiscoveryClient client = holder[0];
                if (client != null) {
                    Applications apps = client.getApplications();
                    out.put("hash", apps.getReconcileHashCode());
                    out.put("version", apps.getVersion());
                    out.put("instances", countInstances(apps));
                }
                emit(out);
            } else if (e instanceof StatusChangeEvent) {
                StatusChangeEvent change = (StatusChangeEvent) e;
                ObjectNode out = event("statusChange");
                out.put("previous", String.valueOf(change.getPreviousStatus()));
                out.put("current", String.valueOf(change.getStatus()));
                emit(out);
            }
        };
        Set<EurekaEventListener> listeners = Collections.singleton(listener);
        DiscoveryClient client = ClientTransport.newDiscoveryClient(manager, new DefaultEurekaClientConfig(), listeners);
        holder[0] = client;
        if (register) {
            // As Netflix's ExampleServiceBase: start STARTING, then declare the instance UP.
            manager.setInstanceStatus(InstanceStatus.UP);
        }

        ObjectNode ready = event("ready");
        ready.put("role", role);
        ready.put("transport", ClientTransport.NAME);
        ready.put("app", instanceInfo.getAppName());
        ready.put("instanceId", instanceInfo.getId());
        ready.put("vip", instanceInfo.getVIPAddress());
        ready.put("status", instanceInfo.getStatus().name());
        ready.put("hash", client.getApplications().getReconcileHashCode());
        emit(ready);

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        long shutdownId = -1;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode command;
            try {
                command = JSON.readTree(line);
            } catch (Exception e) {
                ObjectNode error = event("error");
                error.put("message", "not JSON: " + line);
                emit(error);
                continue;
            }
            String cmd = command.path("cmd").asText();
            long id = command.path("id").asLong();
            if (cmd.equals("shutdown")) {
                shutdownId = id;
                break;
            }
            try {
                handle(cmd, id, command, client, manager);
            } catch (RuntimeException e) {
                ObjectNode error = event("error");
                error.put("id", id);
                error.put("message", e.toString());
                emit(error);
            }
        }
        client.shutdown();
        ObjectNode stopped = event("stopped");
        stopped.put("id", shutdownId);
        emit(stopped);
        System.exit(0);
    }

    private static void setDefault(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    static int countInstances(Applications apps) {
        int n = 0;
        for (Application application : apps.getRegisteredApplications()) {
            n += application.getInstancesAsIsFromEureka().size();
        }
        return n;
    }

    private static void handle(String cmd, long id, JsonNode command, DiscoveryClient client,
                               ApplicationInfoManager manager) {
        switch (cmd) {
            case "state" -> emit(state(id, command, client, manager));
            case "metadata" -> {
                Map<String, String> entries = new HashMap<>();
                for (Iterator<Map.Entry<String, JsonNode>> it = command.path("entries").fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> entry = it.next();
                    entries.put(entry.getKey(), entry.getValue().asText());
                }
                manager.registerAppMetadata(entries);
                ObjectNode done = event("done");
                done.put("id", id);
                emit(done);
            }
            case "status" -> {
                manager.setInstanceStatus(InstanceStatus.valueOf(command.path("value").asText()));
                ObjectNode done = event("done");
                done.put("id", id);
                emit(done);
            }
            default -> throw new IllegalArgumentException("unknown command " + cmd);
        }
    }

    /** The client's local registry as its API shows it to an application. */
    private static ObjectNode state(long id, JsonNode command, DiscoveryClient client, ApplicationInfoManager manager) {
        ObjectNode out = event("state");
        out.put("id", id);
        Applications applications = client.getApplications();
        out.put("hash", applications.getReconcileHashCode());
        out.put("version", applications.getVersion());
        out.put("localStatus", manager.getInfo().getStatus().name());
        out.put("remoteStatus", String.valueOf(client.getInstanceRemoteStatus()));
        out.put("lastFetchAgoMs", client.getLastSuccessfulRegistryFetchTimePeriod());
        out.put("lastHeartbeatAgoMs", client.getLastSuccessfulHeartbeatTimePeriod());

        ObjectNode apps = out.putObject("apps");
        for (JsonNode name : command.path("apps")) {
            ArrayNode list = apps.putArray(name.asText());
            Application application = client.getApplication(name.asText());
            if (application != null) {
                for (InstanceInfo instance : application.getInstancesAsIsFromEureka()) {
                    list.add(describe(instance));
                }
            }
        }
        ObjectNode vips = out.putObject("vips");
        ObjectNode picks = out.putObject("picks");
        int pickCount = command.path("picks").asInt(0);
        for (JsonNode name : command.path("vips")) {
            String vip = name.asText();
            ArrayNode list = vips.putArray(vip);
            for (InstanceInfo instance : client.getInstancesByVipAddress(vip, false)) {
                list.add(instance.getId());
            }
            ArrayNode chosen = picks.putArray(vip);
            for (int i = 0; i < pickCount; i++) {
                try {
                    chosen.add(client.getNextServerFromEureka(vip, false).getId());
                } catch (RuntimeException e) {
                    chosen.addNull();
                }
            }
        }
        String region = command.path("region").asText("");
        if (!region.isEmpty()) {
            ObjectNode regionApps = out.putObject("regionApps");
            Applications remote = client.getApplicationsForARegion(region);
            if (remote != null) {
                for (Application application : remote.getRegisteredApplications()) {
                    ArrayNode ids = regionApps.putArray(application.getName());
                    for (InstanceInfo instance : application.getInstancesAsIsFromEureka()) {
                        ids.add(instance.getId());
                    }
                }
            }
            ObjectNode regionVips = out.putObject("regionVips");
            for (JsonNode name : command.path("vips")) {
                ArrayNode ids = regionVips.putArray(name.asText());
                for (InstanceInfo instance : client.getInstancesByVipAddress(name.asText(), false, region)) {
                    ids.add(instance.getId());
                }
            }
        }
        return out;
    }

    static ObjectNode describe(InstanceInfo instance) {
        ObjectNode node = JSON.createObjectNode();
        node.put("instanceId", instance.getId());
        node.put("app", instance.getAppName());
        node.put("hostName", instance.getHostName());
        node.put("ipAddr", instance.getIPAddr());
        node.put("port", instance.getPort());
        node.put("status", instance.getStatus().name());
        node.put("overriddenStatus", String.valueOf(instance.getOverriddenStatus()));
        node.put("vipAddress", instance.getVIPAddress());
        node.put("actionType", String.valueOf(instance.getActionType()));
        node.put("lastDirtyTimestamp", instance.getLastDirtyTimestamp());
        Map<String, String> metadata = new LinkedHashMap<>(instance.getMetadata());
        node.set("metadata", JSON.valueToTree(metadata));
        return node;
    }
}
