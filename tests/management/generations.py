from contextlib import contextmanager

from apps.core.generations import local_generation


@contextmanager
def bumps_generation(organization, capture_on_commit, *, bumped: bool = True):
    """Runs the block's on-commit callbacks and checks that the organization's configuration
    generation moved (or, with ``bumped=False``, did not): proxy workers rebuild only when it moves."""
    before = local_generation(organization.id)
    with capture_on_commit(execute=True):
        yield
    after = local_generation(organization.id)
    assert (after > before) is bumped, (before, after)
