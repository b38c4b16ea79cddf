"""Translations between the client APIs the proxy serves, one module per pair of formats.

An adapter (``apps/proxy/adapters``) speaks one upstream's wire format from chat completions; a
bridge lets a client API the upstream does not speak reach it through chat completions: the
request one way, the answer (whole or streamed) the other. Bridges do no I/O and know no provider.
"""
