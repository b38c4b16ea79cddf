"""What a provider's API asks of every caller, the proxy's adapters and the key check alike."""

# The Messages API version the gateway speaks (the ``anthropic-version`` header).
ANTHROPIC_VERSION = "2023-06-01"
