"""Who may use the Eureka API: accounts (Django users) with a role each, proving themselves by HTTP
Basic credentials or a client certificate.

Opt-in with ``EUREKA_API_AUTH``. Three roles, created as Django groups by a migration: *client*
(register, renew, cancel, status and metadata of instances; read), *reader* (read only) and *peer*
(everything, including replication). ``roles.py`` says which operation needs which permission,
``credentials.py`` remembers verified credentials for a short time (a password hash costs more than
a thousand heartbeats), ``accounts.py`` checks them against the database and ``drf.py`` plugs both
into the protocol's DRF views. ``models.py`` holds each account's certificate names and app grants:
``certificates.py`` reads a client certificate's names (from the TLS connection or a trusted proxy's
header), ``grants.py`` says which apps a *client* account may write.
"""
