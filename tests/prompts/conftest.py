import pytest

from apps.prompts import services

SUPPORT = {
    "messages": [
        {"role": "system", "content": "You are {{company}}'s support agent. Answer in {{ language }}."},
        {"role": "user", "content": "{{question}}"},
    ],
    "variables": [{"name": "company", "default": "Acme"}, {"name": "language"}, {"name": "question"}],
    "defaults": {"model": "gpt-4o-mini", "temperature": 0.2, "max_tokens": 300},
}


def make_template(
    organization, slug: str = "support", *, versions: int = 1, label: str | None = "production"
):
    """A template with ``versions`` versions of ``SUPPORT`` (the n-th's temperature is n / 10), and
    ``label`` on the newest."""
    template = services.template_create(organization=organization, data={"slug": slug, "name": slug.title()})
    for number in range(1, versions + 1):
        services.version_create(
            template=template,
            data={**SUPPORT, "defaults": {**SUPPORT["defaults"], "temperature": number / 10}},
        )
    if label and versions:
        services.label_set(template=template, name=label, version=versions)
    return template


@pytest.fixture
def template(organization):
    return make_template(organization, versions=2)


@pytest.fixture
def outsiders_template(outsider):
    return make_template(outsider.organization, "support", versions=1)
