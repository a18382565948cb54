// DPoP proofs as the TypeScript SDK client makes them (DpopSession, @modelcontextprotocol/client),
// for the gateway's proof checks to verify. Prints JSON: per algorithm, the session's thumbprint
// and two proofs for the same request (with the access token's ath, and a nonce when given).
// Usage: node ts_dpop_proofs.mjs <htm> <htu> <access token> <nonce or ""> <alg>...
import { DpopSession } from '@modelcontextprotocol/client';

const [htm, htu, accessToken, nonce, ...algs] = process.argv.slice(2);
const sessions = [];
for (const alg of algs) {
  const session = await DpopSession.create({ alg });
  const request = { htm, htu, accessToken, ...(nonce ? { nonce } : {}) };
  const proofs = [await session.buildProof(request), await session.buildProof(request)];
  sessions.push({ alg, thumbprint: session.thumbprint, proofs });
}
console.log(JSON.stringify(sessions));
