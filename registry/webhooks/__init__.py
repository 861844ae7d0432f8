"""Webhooks: registry changes POSTed as signed JSON to the URLs operators subscribe in the admin.

``policy.py`` is the plain-Python part (which change matches which subscription, the payload, the
signature, the retry schedule, how an answer is classified); ``models.py`` holds the subscriptions and
the delivery log; ``relay.py`` runs in the node, listens to the change log and turns matching changes
into delivery rows (and, in embedded mode, sends them from a background thread); ``sender.py`` claims
due deliveries and posts them, for that thread and for the Celery task of ``tasks.py`` (production
mode); ``store.py`` is the database work they share; ``admin.py`` the admin pages.

Nothing here is on the request path: a slow or dead receiver never slows a heartbeat.
"""
