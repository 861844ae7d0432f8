package interop.eureka;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.netflix.appinfo.InstanceInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.discovery.DiscoveryClient;
import org.springframework.cloud.netflix.eureka.EurekaServiceInstance;
import org.springframework.context.annotation.Bean;
import org.springframework.scheduling.annotation.EnableScheduling;
import org.springframework.scheduling.annotation.Scheduled;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.RestController;

/**
 * A plain Spring Cloud Eureka client app, run by tests/interop/test_spring_cloud.py.
 *
 * <p>The same jar is a "service" or a "consumer" ({@code interop.role}). Both register and expose
 * {@code GET /peers/{service}}: what {@link DiscoveryClient#getInstances} returns, i.e. the instances the
 * Eureka client holds in its local registry (UP instances only, Eureka's default filter). A consumer also
 * polls the discovery client for {@code interop.watch} and logs every change of that list.
 */
@SpringBootApplication
@EnableScheduling
@RestController
public class InteropApp {

	private final DiscoveryClient discoveryClient;

	public InteropApp(DiscoveryClient discoveryClient) {
		this.discoveryClient = discoveryClient;
	}

	public static void main(String[] args) {
		SpringApplication.run(InteropApp.class, args);
	}

	@GetMapping("/peers/{service}")
	public List<Map<String, Object>> peers(@PathVariable("service") String service) {
		return describe(this.discoveryClient.getInstances(service));
	}

	@GetMapping("/services")
	public List<String> services() {
		return this.discoveryClient.getServices();
	}

	static List<Map<String, Object>> describe(List<ServiceInstance> instances) {
		return instances.stream().map(InteropApp::describe).toList();
	}

	static Map<String, Object> describe(ServiceInstance instance) {
		Map<String, Object> out = new LinkedHashMap<>();
		out.put("serviceId", instance.getServiceId());
		out.put("instanceId", instance.getInstanceId());
		out.put("host", instance.getHost());
		out.put("port", instance.getPort());
		out.put("uri", String.valueOf(instance.getUri()));
		out.put("metadata", instance.getMetadata());
		if (instance instanceof EurekaServiceInstance eureka) {
			InstanceInfo info = eureka.getInstanceInfo();
			out.put("status", String.valueOf(info.getStatus()));
			out.put("overriddenStatus", String.valueOf(info.getOverriddenStatus()));
			out.put("vipAddress", info.getVIPAddress());
			out.put("lastDirtyTimestamp", info.getLastDirtyTimestamp());
		}
		return out;
	}

	@Bean
	@ConditionalOnProperty(name = "interop.role", havingValue = "consumer")
	PeerWatcher peerWatcher(DiscoveryClient discoveryClient, @Value("${interop.watch}") String service) {
		return new PeerWatcher(discoveryClient, service);
	}

	/** The consumer role: logs "discovered {service}: [...]" each time the discovered list changes. */
	static class PeerWatcher {

		private static final Logger log = LoggerFactory.getLogger(PeerWatcher.class);

		private final DiscoveryClient discoveryClient;

		private final String service;

		private String last = "";

		PeerWatcher(DiscoveryClient discoveryClient, String service) {
			this.discoveryClient = discoveryClient;
			this.service = service;
		}

		@Scheduled(fixedDelay = 250)
		void watch() {
			String now = this.discoveryClient.getInstances(this.service)
				.stream()
				.map(i -> i.getInstanceId() + "@" + i.getHost() + ":" + i.getPort())
				.sorted()
				.toList()
				.toString();
			if (!now.equals(this.last)) {
				log.info("discovered {}: {}", this.service, now);
				this.last = now;
			}
		}

	}

}
