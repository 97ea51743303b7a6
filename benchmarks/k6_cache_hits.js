// Load for the cache-proxy benchmark (benchmarks/cache_proxy.py): the seed's request,
// POST {TARGET}/v1/chat/completions, "Write a short story about the number ${n}.",
// max_tokens 128, with n drawn from PROMPTS distinct values.
// MODE=hits:   constant VUs for DURATION, n = floor(random() * PROMPTS)
// MODE=warm:   1 VU sends n = 0 .. PROMPTS-1 once each (fills the cache)
// MODE=unique: constant VUs, every request a new prompt (every request a miss)
// NO_STORE=1 adds "Cache-Control: no-store" (the proxy bypasses its cache).
import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';

const TARGET = __ENV.TARGET || 'http://127.0.0.1:8000';
const PROMPTS = parseInt(__ENV.PROMPTS || '50');
const MODEL = __ENV.MODEL || 'stub-model';
const MAX_TOKENS = parseInt(__ENV.MAX_TOKENS || '128');
const MODE = __ENV.MODE || 'hits';
const VUS = parseInt(__ENV.VUS || '32');
const DURATION = __ENV.DURATION || '10s';
const HEADERS = { 'Content-Type': 'application/json' };
if (__ENV.NO_STORE === '1') {
  HEADERS['Cache-Control'] = 'no-store';
}

export const options = {
  scenarios: {
    load: MODE === 'warm'
      ? { executor: 'per-vu-iterations', vus: 1, iterations: PROMPTS, maxDuration: '120s' }
      : { executor: 'constant-vus', vus: VUS, duration: DURATION },
  },
  discardResponseBodies: true,
};

export function setup() {
  const response = http.get(`${TARGET}/health`);
  if (response.status !== 200) {
    exec.test.abort(`health check of ${TARGET} answered ${response.status}`);
  }
}

export default function () {
  let n;
  if (MODE === 'warm') {
    n = exec.scenario.iterationInTest;
  } else if (MODE === 'unique') {
    n = `${exec.vu.idInTest}-${exec.vu.iterationInScenario}-${Date.now()}`;
  } else {
    n = Math.floor(Math.random() * PROMPTS);
  }
  const body = JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: `Write a short story about the number ${n}.` }],
    max_tokens: MAX_TOKENS,
  });
  const response = http.post(`${TARGET}/v1/chat/completions`, body, { headers: HEADERS });
  check(response, { 'status is 200': (r) => r.status === 200 });
}
