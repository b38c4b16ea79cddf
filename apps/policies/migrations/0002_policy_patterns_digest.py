from django.db import migrations, models


def check_stored_patterns(apps, schema_editor):
    """Superseded by 0003, which checks every stored policy's patterns and terms (the digest this
    migration wrote is replaced there)."""


class Migration(migrations.Migration):
    dependencies = [
        ("policies", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="policy",
            name="patterns_digest",
            field=models.CharField(blank=True, default="", editable=False, max_length=64),
        ),
        migrations.RunPython(check_stored_patterns, migrations.RunPython.noop),
    ]
