"""The Django admin of the registry: where operators override instance statuses.

``site.py`` is the project's admin site (it adds the *Registered instances* pages of ``views.py``
beside the models); ``forms.py`` validates filters and override requests; ``audit.py`` writes a
``StatusOverrideRecord`` before each change and applies it through ``registry.runtime.operations``,
the path the protocol's ``PUT/DELETE .../status`` takes too; ``records.py`` shows the audit trail;
``accounts.py`` puts an API account's certificate names and app grants on its user's page.

The site registers the registry's models itself: Django imports ``default_site`` from this package
while the admin is being set up, so a registration run on this package's import would land on a
site that is then thrown away.
"""
