"""The node's settings, read once from the environment into frozen objects: ``settings.EUREKA``.

eureka.py assembles ``EurekaConfig`` from its sections and parses it (``parse_config``); services.py
holds the sections of the node's services beside the lease map (warm restart, the change feed,
webhooks, health checks, Redis, readers), site.py those of the site around it (connections, the
process, API accounts, HTTPS, the console, metrics); Eureka's own sections, and how a setting is
declared, are in the domain (registry/domain/config.py). environment.py reads the variables, and
docs.py writes docs/configuration.md's tables from the declarations.
"""
