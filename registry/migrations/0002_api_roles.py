"""The Eureka API permissions and the three roles that hold them, as Django groups.

The values are written out here rather than imported, so this migration keeps meaning what it meant
when later code changes (registry/access/roles.py is the living copy).
"""

from django.db import migrations, models

PERMISSIONS = {
    "read_registry": "Can read the registry (Eureka API)",
    "write_instances": "Can register, renew, cancel and change instances (Eureka API)",
    "replicate_registry": "Can send peer replication (Eureka API)",
}
GROUPS = {
    "eureka-client": ("read_registry", "write_instances"),
    "eureka-reader": ("read_registry",),
    "eureka-peer": ("read_registry", "write_instances", "replicate_registry"),
}


def create_roles(apps, schema_editor):
    content_type_model = apps.get_model("contenttypes", "ContentType")
    permission_model = apps.get_model("auth", "Permission")
    group_model = apps.get_model("auth", "Group")
    content_type, _ = content_type_model.objects.get_or_create(app_label="registry", model="registryapi")
    permissions = {}
    for codename, name in PERMISSIONS.items():
        permissions[codename], _ = permission_model.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
    for group_name, codenames in GROUPS.items():
        group, _ = group_model.objects.get_or_create(name=group_name)
        group.permissions.add(*(permissions[codename] for codename in codenames))


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=GROUPS).delete()
    apps.get_model("auth", "Permission").objects.filter(
        content_type__app_label="registry", codename__in=PERMISSIONS
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="RegistryApi",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "verbose_name": "Eureka API",
                "permissions": list(PERMISSIONS.items()),
                "managed": False,
                "default_permissions": (),
            },
        ),
        migrations.RunPython(create_roles, remove_roles),
    ]
