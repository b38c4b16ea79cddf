"""IPv6 addresses that carry an IPv4 address (NAT64, 6to4, Teredo, IPv4-compatible and -mapped)
reach that IPv4 address through a translator: the upstream check judges the IPv4 address inside."""

import pytest

from apps.providers.addresses import AddressRefused, check_ip
from apps.providers.models import ProviderKey
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

URL = "/api/v1/provider-keys"

# 169.254.169.254 (the metadata service) inside each IPv6 form.
METADATA_INSIDE = [
    "64:ff9b::a9fe:a9fe",  # NAT64, well-known prefix (RFC 6052)
    "64:ff9b::169.254.169.254",
    "64:ff9b:1::a9fe:a9fe",  # NAT64, local-use prefix (RFC 8215)
    "2002:a9fe:a9fe::",  # 6to4
    "2002:a9fe:a9fe:1234::1",
    "::169.254.169.254",  # IPv4-compatible (deprecated, still parsed)
    "::ffff:169.254.169.254",  # IPv4-mapped
    "::ffff:0:a9fe:a9fe",  # IPv4-translated (RFC 2765)
    "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, client 169.254.169.254 (obfuscated)
]
# Loopback and private IPv4 addresses inside the same forms.
PRIVATE_INSIDE = [
    "64:ff9b::7f00:1",
    "64:ff9b::10.0.0.7",
    "2002:7f00:1::",
    "2002:c0a8:101::",
    "::127.0.0.1",
    "::10.0.0.7",
    "::ffff:127.0.0.1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
]


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("address", METADATA_INSIDE)
def test_check_ip_refuses_the_metadata_service_inside_an_ipv6_address(settings, allow_private, address):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = allow_private

    with pytest.raises(AddressRefused, match="never allowed"):
        check_ip(address)


@pytest.mark.parametrize("address", PRIVATE_INSIDE)
def test_check_ip_refuses_a_private_address_inside_an_ipv6_address(settings, address):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = False

    with pytest.raises(AddressRefused, match="GATEWAY_ALLOW_PRIVATE_UPSTREAMS"):
        check_ip(address)


@pytest.mark.parametrize(
    "address", ["64:ff9b::808:808", "2002:808:808::", "2606:4700:4700::1111", "8.8.8.8", "::ffff:8.8.8.8"]
)
def test_check_ip_accepts_a_public_address_in_any_form(settings, address):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = False

    check_ip(address)


@pytest.mark.parametrize("address", PRIVATE_INSIDE)
def test_check_ip_accepts_a_private_address_inside_ipv6_when_private_upstreams_are_allowed(settings, address):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = True

    check_ip(address)


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("address", METADATA_INSIDE)
def test_the_api_refuses_a_base_url_with_the_metadata_service_inside_ipv6(
    session_client, settings, allow_private, address
):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = allow_private
    body = {"provider": "openai_compatible", "key": "sk-upstream-v6", "base_url": f"http://[{address}]/v1"}

    response = session_client.post(URL, body, format="json")

    error = assert_error(response, 400, "validation_error")
    assert "never allowed" in error["fields"]["base_url"][0]
    assert not ProviderKey.objects.exists()


@pytest.mark.parametrize("address", PRIVATE_INSIDE)
def test_the_api_refuses_a_base_url_with_a_private_address_inside_ipv6(session_client, settings, address):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = False
    body = {"provider": "openai_compatible", "key": "sk-upstream-v6", "base_url": f"http://[{address}]/v1"}

    response = session_client.post(URL, body, format="json")

    error = assert_error(response, 400, "validation_error")
    assert "GATEWAY_ALLOW_PRIVATE_UPSTREAMS" in error["fields"]["base_url"][0]
    assert not ProviderKey.objects.exists()


# The local-use NAT64 prefix (RFC 8215) is a /48: RFC 6052 puts the IPv4 address in bits 48-63 and
# 72-95 there, not in the last 32 bits, so an address of it cannot be judged by its last 32 bits.
LOCAL_USE_NAT64 = [
    "64:ff9b:1:a9fe:a9:fe00::",  # 169.254.169.254 where RFC 6052 puts it for a /48 prefix
    "64:ff9b:1:808:8:800::",  # 8.8.8.8, likewise
    "64:ff9b:1::808:808",  # 8.8.8.8 in the last 32 bits, as for a /96 prefix
    "64:ff9b:1:ffff::1",
]


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("address", LOCAL_USE_NAT64)
def test_check_ip_refuses_every_address_of_the_local_use_nat64_prefix(settings, allow_private, address):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = allow_private

    with pytest.raises(AddressRefused, match="never allowed"):
        check_ip(address)


@pytest.mark.parametrize("allow_private", [False, True])
def test_the_api_refuses_the_metadata_service_inside_the_local_use_nat64_prefix(
    session_client, settings, allow_private
):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = allow_private
    base_url = "http://[64:ff9b:1:a9fe:a9:fe00::]/v1"
    body = {"provider": "openai_compatible", "key": "sk-upstream-v6", "base_url": base_url}

    response = session_client.post(URL, body, format="json")

    error = assert_error(response, 400, "validation_error")
    assert "never allowed" in error["fields"]["base_url"][0]
    assert not ProviderKey.objects.exists()
