package interop.sce;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.cloud.netflix.eureka.server.EnableEurekaServer;

/** A stock Spring Cloud Netflix Eureka Server; all its settings come from the command line. */
@SpringBootApplication
@EnableEurekaServer
public class SceServer {

	public static void main(String[] args) {
		SpringApplication.run(SceServer.class, args);
	}

}
