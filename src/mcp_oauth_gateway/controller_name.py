"""The Gateway API controller name this gateway answers to by default (a GatewayClass's
`spec.controllerName`). Its own module: the command line shows it as a flag's default, and
building the parser must not load the control plane."""

CONTROLLER_NAME = "mcp-oauth-gateway.dev/gateway-controller"
