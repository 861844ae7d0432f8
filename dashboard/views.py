"""A minimal status console; the full Eureka-style page is a later issue.

Reads the registry only through ``registry.node``'s public node API.
"""

from django.shortcuts import render

from registry.node import get_node


def status_page(request):
    node = get_node()
    now = node.now()
    snapshot = node.registry.snapshot()
    apps = [
        {
            "name": name,
            "instances": [(view.instance.instance_id, view.instance.status) for view in views],
        }
        for name, views in sorted(snapshot.apps)
    ]
    context = {"stats": node.registry.stats(now), "apps": apps, "hashcode": snapshot.hashcode}
    return render(request, "dashboard/status.html", context)
