"""Names and defaults fixed by the Eureka wire protocol (see the protocol reference, sections 3 and 6)."""

UP = "UP"
DOWN = "DOWN"
STARTING = "STARTING"
OUT_OF_SERVICE = "OUT_OF_SERVICE"
UNKNOWN = "UNKNOWN"
STATUSES = frozenset({UP, DOWN, STARTING, OUT_OF_SERVICE, UNKNOWN})

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

DEFAULT_DATA_CENTER_CLASS = "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"
AMAZON_DATA_CENTER_CLASS = "com.netflix.appinfo.AmazonInfo"
DATA_CENTER_NAMES = frozenset({"Netflix", "Amazon", "MyOwn"})
EMPTY_MAP_CLASS = "java.util.Collections$EmptyMap"

# InstanceInfo defaults the Java decoder starts from when a key is missing.
DEFAULT_PORT = 7001
DEFAULT_SECURE_PORT = 7002
DEFAULT_COUNTRY_ID = 1
DEFAULT_SID = "na"
DEFAULT_RENEWAL_INTERVAL_SECS = 30
DEFAULT_DURATION_SECS = 90

RECENT_EVENTS_KEPT = 1000

# Peer replication actions (``PeerEurekaNode``'s batch items name them so on the wire).
REPLICATE_REGISTER = "Register"
REPLICATE_HEARTBEAT = "Heartbeat"
REPLICATE_CANCEL = "Cancel"
REPLICATE_STATUS_UPDATE = "StatusUpdate"
REPLICATE_DELETE_STATUS_OVERRIDE = "DeleteStatusOverride"
REPLICATION_ACTIONS = frozenset(
    {
        REPLICATE_REGISTER,
        REPLICATE_HEARTBEAT,
        REPLICATE_CANCEL,
        REPLICATE_STATUS_UPDATE,
        REPLICATE_DELETE_STATUS_OVERRIDE,
    }
)

# ``DiscoveryIdentity-Name`` of requests a Eureka server makes (Eureka's ``EurekaServerIdentity``);
# clients send ``DefaultClient``.
SERVER_IDENTITY = "DefaultServer"

# The shared secret's header on the node's control endpoint (registry/protocol/control.py), which
# Celery tasks call (registry/runtime/tasks.py). Here, not in tasks.py, so that serving the endpoint
# does not import Celery: an embedded node never loads it.
CONTROL_HEADER = "X-Eureka-Control-Secret"
