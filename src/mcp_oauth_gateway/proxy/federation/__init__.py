"""Federation: a GatewayBackend's several MCP servers served as one. The gateway answers the
client's Streamable HTTP session itself (`stage`), holds one session with each target
(`session`, `target`), merges their lists (`merge`, paginated by `cursor`) and routes each call
to its target under the names `controlplane.federation` decides."""
