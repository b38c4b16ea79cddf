from django.db import migrations, models


def check_stored_patterns(apps, schema_editor):
    """Patterns stored before the save-time check were never tested: each policy's list is checked
    now (in a child process, as a save does); a list that passes gets its digest and the proxy
    compiles it, one that fails keeps none and blocks the requests its policy applies to until an
    admin changes it (docs/policies.md)."""
    from apps.policies.patterns import PatternRefused, check_patterns, patterns_digest

    Policy = apps.get_model("policies", "Policy")
    for policy in Policy.objects.exclude(patterns=[]).only("id", "patterns").iterator():
        try:
            check_patterns(list(policy.patterns))
        except PatternRefused:
            continue
        Policy.objects.filter(pk=policy.pk).update(patterns_digest=patterns_digest(policy.patterns))


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
