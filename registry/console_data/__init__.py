"""What the status console and the admin read from the node: the one module both import.

The pages (``dashboard/``) and the admin's override pages (``registry/admin/``) see the registry only
through the names below: the console's blocks (``console.py``: system status, general and instance
info, replicas, remote regions, recent events, leases), the instance search both share
(``queries.py``: filters, grouping, paging) and the last hour's charts (``charts.py``). None imports
the others' pages, nor the node's internals.
"""

from registry.console_data.charts import instance_chart, node_charts
from registry.console_data.console import (
    events_of,
    format_time,
    general_info,
    instance_fields,
    instance_info,
    lease_detail,
    recent_lists,
    recount_schedule,
    remote_regions,
    replica_health,
    system_status,
)
from registry.console_data.queries import (
    STATUS_ORDER,
    BadQuery,
    InstanceQuery,
    page_of,
    parse_metadata_filter,
    select,
)

__all__ = [
    "instance_chart",
    "node_charts",
    "STATUS_ORDER",
    "BadQuery",
    "InstanceQuery",
    "events_of",
    "format_time",
    "general_info",
    "instance_fields",
    "instance_info",
    "lease_detail",
    "page_of",
    "parse_metadata_filter",
    "recent_lists",
    "recount_schedule",
    "remote_regions",
    "replica_health",
    "select",
    "system_status",
]
