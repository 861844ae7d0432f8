"""The Eureka registry: lease map, wire protocol, response cache and periodic jobs."""
