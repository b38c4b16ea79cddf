from django.urls import path

from . import exports

urlpatterns = [
    path("analytics/compliance/export", exports.compliance_export, name="analytics-compliance-export"),
    path("analytics/policy/export", exports.policy_export, name="analytics-policy-export"),
]
