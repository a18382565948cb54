-- POST a JSON-RPC tools/call with one bearer token (TOKEN) or a different one per request,
-- cycling through the lines of TOKENS_FILE.
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
local token = os.getenv("TOKEN")
if token and #token > 0 then
  wrk.headers["Authorization"] = "Bearer " .. token
end
local tokens = {}
local file = os.getenv("TOKENS_FILE")
if file and #file > 0 then
  for line in io.lines(file) do tokens[#tokens + 1] = line end
end
local i = 0
if #tokens > 0 then
  request = function()
    i = i + 1
    if i > #tokens then i = 1 end
    wrk.headers["Authorization"] = "Bearer " .. tokens[i]
    return wrk.format()
  end
end
