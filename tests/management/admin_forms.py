from django.test import Client


def form_values(client: Client, url: str, **changes) -> dict:
    """What a browser posts back from an admin add or change page: every field of the form and
    its inlines with the value the page shows, then ``changes``."""
    page = client.get(url)
    assert page.status_code == 200, page.status_code
    forms = [page.context["adminform"].form]
    for inline in page.context["inline_admin_formsets"]:
        forms.append(inline.formset.management_form)
        forms.extend(inline.formset.forms)
    data: dict = {}
    for form in forms:
        for field in form:
            value = field.value()
            if value is True:
                data[field.html_name] = "on"
            elif value is not None and value is not False:  # 0 is a value (a priority), not False
                data[field.html_name] = value
    data.update(changes)
    return data


def admin_post(client: Client, url: str, *, follow: bool = False, **changes):
    """Submits an admin page as a browser would, changing only ``changes``."""
    return client.post(url, form_values(client, url, **changes), follow=follow)


def form_errors(page) -> dict:
    """The errors an admin page shows, for assertion messages."""
    if page.context is None or "adminform" not in page.context:
        return {"status": page.status_code}
    errors = dict(page.context["adminform"].form.errors)
    for inline in page.context.get("inline_admin_formsets", ()):
        errors.update(
            {f"inline-{i}": form.errors for i, form in enumerate(inline.formset.forms) if form.errors}
        )
    return errors
