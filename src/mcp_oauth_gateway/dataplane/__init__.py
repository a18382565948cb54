"""Data plane: the ASGI app (`app.GatewayApp`) and its pipeline stages."""
