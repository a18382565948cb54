"""Federation: a GatewayBackend's several MCP servers served as one. The gateway answers the
client's Streamable HTTP session itself (`stage`), holds one session with each target
(`session`, `target`), merges their lists (`merge`, paginated by `cursor`) and routes each call
to its target under the names `controlplane.federation` decides. What targets send the client
besides answers (notifications, requests of their own) is relayed on the call's stream or the
client's merged GET stream (`streams`), rewritten (`rewrite`) under ids the session minted
(`exchange`), so the client's answers and cancellations reach the right target only."""
