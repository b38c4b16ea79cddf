from django.db import migrations, models


def check_stored_rules(apps, schema_editor):
    """Terms stored before the save-time check were never tested, nor measured (and patterns were
    not measured): each policy's patterns and terms are checked now (in a child process, as a save
    does). What passes gets its measures and digest and the proxy compiles it, within the
    organization's bound; what fails keeps none and blocks the requests its policy applies to until
    an admin changes it (docs/policies.md)."""
    from apps.policies.patterns import PatternRefused, check_rules, rules_digest

    Policy = apps.get_model("policies", "Policy")
    stored = Policy.objects.exclude(patterns=[], terms=[]).only("id", "patterns", "terms")
    for policy in stored.iterator():
        try:
            cost = check_rules(list(policy.patterns), list(policy.terms))
        except PatternRefused:
            Policy.objects.filter(pk=policy.pk).update(rules_digest="")
            continue
        Policy.objects.filter(pk=policy.pk).update(
            rules_digest=rules_digest(policy.patterns, policy.terms, cost),
            compile_micros=cost.compile_micros,
            program_bytes=cost.program_bytes,
        )


class Migration(migrations.Migration):
    dependencies = [
        ("policies", "0002_policy_patterns_digest"),
    ]

    operations = [
        migrations.RenameField(model_name="policy", old_name="patterns_digest", new_name="rules_digest"),
        migrations.AddField(
            model_name="policy",
            name="compile_micros",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="policy",
            name="program_bytes",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(check_stored_rules, migrations.RunPython.noop),
    ]
