"""The proxy's runtime (apps/proxy/runtime.py) is built once per process, whatever runs ``ready`` again."""

from django.apps import apps

from apps.proxy.runtime import runtime


def test_a_second_ready_keeps_the_registered_stages_and_the_runtime():
    stages_before = [type(stage).__name__ for stage in runtime.stages.registered]
    keys, policy_builds = runtime.keys, runtime.policy_builds

    apps.get_app_config("proxy").ready()

    assert stages_before  # policies, the cache, the cost
    assert [type(stage).__name__ for stage in runtime.stages.registered] == stages_before
    assert runtime.keys is keys and runtime.policy_builds is policy_builds
