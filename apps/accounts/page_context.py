"""What the pages of a signed-in person (apps/accounts/views.py) add to their context. The console,
above accounts, registers its navigation here in its ``AppConfig.ready`` (every process runs it),
without loading the views or allauth's two-factor pages at start-up."""

from collections.abc import Callable

from django.http import HttpRequest

PageContext = Callable[[HttpRequest], dict]

# In the order registered.
page_contexts: list[PageContext] = []


def register_page_context(page_context: PageContext) -> None:
    if page_context not in page_contexts:  # ready() may run more than once in a test process
        page_contexts.append(page_context)
