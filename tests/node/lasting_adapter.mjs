// The storage of the oidc-provider peers (idp.mjs, upstream_as.mjs): oidc-provider's own
// in-memory adapter over a store that forgets an entry only once it expires.
//
// The library's development store keeps its last 1,000 entries (an LRU). Under a long test's
// traffic (hundreds of sign-ins, each a session, an interaction, a grant, a code and rotated
// refresh tokens) it forgets refresh tokens still in use, and the provider answers
// "refresh token not found" to a user who did nothing wrong: no real provider does that, and a
// test of "nothing a client was told is lost" would blame the gateway for it.
import MemoryAdapter from 'oidc-provider/lib/adapters/memory_adapter.js';

class LastingStore {
  #entries = new Map();

  get(key) {
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiry <= Date.now()) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  // `maxAge` in milliseconds, as the library's LRU takes it; none: until deleted.
  set(key, value, options) {
    const expiry = options?.maxAge === undefined ? Infinity : Date.now() + options.maxAge;
    this.#entries.set(key, { value, expiry });
  }

  delete(key) {
    this.#entries.delete(key);
  }
}

// The `adapter` option of `new Provider(...)`: one store for every model, as the library's.
export function lastingAdapter() {
  const store = new LastingStore();
  return (model) => new MemoryAdapter(model, store);
}
