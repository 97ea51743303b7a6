// Shared library of the lab's k6 workloads.
//
// Everything comes from __ENV with defaults (the lab passes `-e KEY=VALUE`); nothing is
// imported from a URL, only k6 built-ins, so k6 runs offline.
//
// Settings read here:
//   TARGET (base URL), MODEL, MAX_TOKENS (128), TEMPERATURE and TOP_P (optional), SEED_BASE (1),
//   LOAD_KIND: constant-vus (VUS, DURATION) | ramping-vus (STAGES JSON, START_VUS)
//              | constant-arrival-rate (RATE per TIME_UNIT ("1s"), DURATION, PRE_ALLOCATED_VUS, MAX_VUS),
//   GRACEFUL_STOP ("30s"), GRACEFUL_RAMP_DOWN ("30s"), REQUEST_TIMEOUT ("600s"),
//   SUMMARY_PATH (where handleSummary writes the JSON summary),
//   STREAM ("1": ask for streamed answers with `stream_options.include_usage`),
//   REQUEST_IDS ("0"; "1": each request's samples carry the metadata `lab_request_id`, for
//   joining one request's points by id; off by default: setting and clearing it per request
//   cost k6 about a fifth of its CPU per 1,000 req/s, BENCHMARKS.md "What one request costs").
//
// Streamed answers: client TTFT is k6's http_req_waiting (time to first byte; the lab's
// servers and vLLM send their headers with the first token's chunk) and time per output
// token is (duration - waiting) / (tokens - 1); both are Trends in ms (lab_ttft, lab_tpot)
// tagged like the request plus `cache` (HIT/MISS) when a response cache answered. An answer
// that comes back as one JSON body although a stream was asked for counts in
// lab_unstreamed_answers and its lab_ttft is the time to the whole body (no lab_tpot).
// With REQUEST_IDS=1 every sample of one request carries the metadata `lab_request_id`
// (NDJSON only: metadata never splits k6's time series, so it costs no memory per request).
//
// Custom metrics carry the prefix `lab_`. Latency stays k6's http_req_duration (ms);
// the thresholds below only exist so that the end-of-test summary carries the
// sub-metric over successful responses (`{expected_response:true}`); they never fail.

import http from "k6/http";
import exec from "k6/execution";
import { Counter, Rate, Trend } from "k6/metrics";

function envString(name, fallback) {
  const value = __ENV[name];
  return value === undefined || value === "" ? fallback : value;
}

function envInt(name, fallback) {
  const raw = envString(name, undefined);
  if (raw === undefined) return fallback;
  const value = parseInt(raw, 10);
  if (Number.isNaN(value)) throw new Error(`${name} must be an integer, got "${raw}"`);
  return value;
}

function envFloat(name, fallback) {
  const raw = envString(name, undefined);
  if (raw === undefined) return fallback;
  const value = parseFloat(raw);
  if (Number.isNaN(value)) throw new Error(`${name} must be a number, got "${raw}"`);
  return value;
}

export const config = {
  target: envString("TARGET", "http://127.0.0.1:8000").replace(/\/+$/, ""),
  model: envString("MODEL", "models/SmolLM2-135M-Instruct"),
  maxTokens: envInt("MAX_TOKENS", 128),
  temperature: envFloat("TEMPERATURE", undefined),
  topP: envFloat("TOP_P", undefined),
  seedBase: envInt("SEED_BASE", envInt("SEED", 1)),
  requestTimeout: envString("REQUEST_TIMEOUT", "600s"),
  stream: envString("STREAM", "0") === "1",
  summaryPath: envString("SUMMARY_PATH", "summary.json"),
  requestIds: envString("REQUEST_IDS", "0") === "1",
};

// Every workload request carries `lab_request: "chat"`, so the health check in setup()
// never counts in the figures (sub-metrics select on it).
export const CHAT_TAG = "lab_request";

export const metrics = {
  inputTokens: new Counter("lab_input_tokens"),
  outputTokens: new Counter("lab_output_tokens"),
  cacheHits: new Rate("lab_cache_hits"),
  requestFailures: new Counter("lab_request_failures"),
  // Counted before each request is sent: started minus completed (http_reqs) is the
  // number of requests still in flight when the test ended (interrupted, not dropped).
  requestsStarted: new Counter("lab_requests_started"),
  // Counted when an iteration starts: started minus `iterations` = interrupted iterations.
  iterationsStarted: new Counter("lab_iterations_started"),
  ttft: new Trend("lab_ttft", true),
  tpot: new Trend("lab_tpot", true),
  unstreamedAnswers: new Counter("lab_unstreamed_answers"),
};

// Only 2xx counts as a success (k6's default also accepts 3xx).
http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }));

/** The `scenarios` entry built from LOAD_KIND and its settings. */
export function buildScenario() {
  const kind = envString("LOAD_KIND", "constant-vus");
  const gracefulStop = envString("GRACEFUL_STOP", "30s");
  if (kind === "constant-vus") {
    return {
      executor: "constant-vus",
      vus: envInt("VUS", 1),
      duration: envString("DURATION", "60s"),
      gracefulStop,
    };
  }
  if (kind === "ramping-vus") {
    const stages = JSON.parse(envString("STAGES", '[{"duration":"10s","target":1}]'));
    if (!Array.isArray(stages) || stages.length === 0) throw new Error("STAGES must be a non-empty JSON array");
    return {
      executor: "ramping-vus",
      startVUs: envInt("START_VUS", 0),
      stages,
      gracefulStop,
      gracefulRampDown: envString("GRACEFUL_RAMP_DOWN", "30s"),
    };
  }
  if (kind === "constant-arrival-rate") {
    const preAllocatedVUs = envInt("PRE_ALLOCATED_VUS", 8);
    return {
      executor: "constant-arrival-rate",
      // RATE iterations per TIME_UNIT: a fractional rate per second is sent as a whole
      // number per minute (0.5/s -> RATE=30, TIME_UNIT=1m).
      rate: envInt("RATE", 1),
      timeUnit: envString("TIME_UNIT", "1s"),
      duration: envString("DURATION", "60s"),
      preAllocatedVUs,
      maxVUs: Math.max(envInt("MAX_VUS", preAllocatedVUs), preAllocatedVUs),
      gracefulStop,
    };
  }
  throw new Error(`unknown LOAD_KIND "${kind}" (constant-vus, ramping-vus, constant-arrival-rate)`);
}

/** The script's `options`: one scenario, trend stats, quiet tags. */
export function buildOptions() {
  return {
    scenarios: { load: buildScenario() },
    summaryTrendStats: ["avg", "min", "med", "max", "p(90)", "p(95)", "p(99)", "count"],
    // Fewer system tags keep the NDJSON small (no url/name per sample).
    systemTags: ["status", "method", "expected_response", "error_code", "scenario"],
    thresholds: {
      [`http_req_duration{${CHAT_TAG}:chat,expected_response:true}`]: ["max>=0"],
      [`http_req_duration{${CHAT_TAG}:chat,expected_response:false}`]: ["max>=0"],
      [`http_reqs{${CHAT_TAG}:chat}`]: ["count>=0"],
      [`http_req_failed{${CHAT_TAG}:chat}`]: ["rate>=0"],
      // Sub-metrics by response-cache outcome (empty when no cache answered).
      "lab_ttft{cache:HIT}": ["max>=0"],
      "lab_ttft{cache:MISS}": ["max>=0"],
      "lab_tpot{cache:HIT}": ["max>=0"],
      "lab_tpot{cache:MISS}": ["max>=0"],
    },
    setupTimeout: "120s",
    teardownTimeout: "60s",
    noConnectionReuse: false,
    // Never follow a redirect: the target was validated, where it points to was not.
    maxRedirects: 0,
  };
}

/** mulberry32: a small seeded PRNG, so a run can be replayed exactly. */
export function mulberry32(seed) {
  let state = seed >>> 0;
  return function next() {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let vuRandom = null;

/** This VU's PRNG, seeded by SEED_BASE + VU id (created on first use). */
export function vuRng() {
  if (vuRandom === null) vuRandom = mulberry32(config.seedBase + exec.vu.idInTest);
  return vuRandom;
}

/** setup() helper: abort the whole test with a clear message unless the target is healthy. */
export function checkHealth() {
  const tried = [];
  for (const path of ["/health", "/v1/models"]) {
    const response = http.get(`${config.target}${path}`, {
      timeout: "10s",
      tags: { name: "healthcheck" },
      responseCallback: http.expectedStatuses({ min: 200, max: 599 }),
    });
    if (response.status === 200) return { healthPath: path };
    tried.push(`${path} -> ${response.status || response.error || "no answer"}`);
  }
  exec.test.abort(`target ${config.target} is not healthy (${tried.join("; ")})`);
  return null;
}

/** The request body for a `messages` list (or a full request object from a file). */
export function chatBody(messagesOrRequest) {
  const request = Array.isArray(messagesOrRequest) ? { messages: messagesOrRequest } : { ...messagesOrRequest };
  const body = { model: config.model, messages: request.messages, max_tokens: config.maxTokens };
  if (config.stream) {
    body.stream = true;
    body.stream_options = { include_usage: true };
  }
  if (config.temperature !== undefined) body.temperature = config.temperature;
  if (config.topP !== undefined) body.top_p = config.topP;
  for (const key of Object.keys(request)) {
    if (key !== "messages" && key !== "model") body[key] = request[key];
  }
  return body;
}

/**
 * An OpenAI SSE body assembled: `{ choices: [{ message, finish_reason }], usage }`, the
 * number of chunks that carried content, and whether it ended with `[DONE]`.
 */
export function parseSse(text) {
  let content = "";
  let finishReason = null;
  let usage = null;
  let contentChunks = 0;
  let done = false;
  for (const line of text.split("\n")) {
    if (!line.startsWith("data:")) continue;
    const data = line.slice(5).trim();
    if (data === "[DONE]") {
      done = true;
      continue;
    }
    let event;
    try {
      event = JSON.parse(data);
    } catch (error) {
      continue;
    }
    if (event.error) return null;
    if (event.usage) usage = event.usage;
    const choice = event.choices && event.choices[0];
    if (!choice) continue;
    const piece = choice.delta && choice.delta.content;
    if (piece) {
      content += piece;
      contentChunks += 1;
    }
    if (choice.finish_reason) finishReason = choice.finish_reason;
  }
  const answer = { choices: [{ message: { role: "assistant", content }, finish_reason: finishReason }], usage };
  return { answer, contentChunks, done };
}

let requestSerial = 0;

/**
 * POST one chat completion; record tokens, cache hits, failures and (streamed) TTFT/TPOT.
 * Returns the parsed response JSON (a streamed one assembled), or null on failure.
 */
export function postChat(messagesOrRequest, extraTags = {}) {
  const tags = { ...extraTags, [CHAT_TAG]: "chat" };
  const request = chatBody(messagesOrRequest);
  const body = JSON.stringify(request);
  if (!config.requestIds) return sendChat(body, request.stream === true, tags);
  requestSerial += 1;
  exec.vu.metrics.metadata.lab_request_id = `${exec.vu.idInTest}-${requestSerial}`;
  try {
    return sendChat(body, request.stream === true, tags);
  } finally {
    delete exec.vu.metrics.metadata.lab_request_id;
  }
}

/**
 * A chat request built ahead of its send: the body as JSON and whether it asks for a stream
 * (the trace replay builds it before it waits for the request's time, so the wait ends in the send).
 */
export function preparedChat(messagesOrRequest) {
  const request = chatBody(messagesOrRequest);
  return { body: JSON.stringify(request), stream: request.stream === true };
}

/** POST a prepared chat request (see postChat; no request ids). */
export function postPrepared(prepared, extraTags = {}) {
  return sendChat(prepared.body, prepared.stream, { ...extraTags, [CHAT_TAG]: "chat" });
}

// The longest error answer kept (status and message), as the failed request's tag.
const ERROR_ANSWER_CHARS = 300;

/**
 * A failed request's answer in one line: its HTTP status and the error's message (OpenAI's
 * `{"error": {"message"}}`, FastAPI's `{"detail"}`, or the body's start), or "no answer"
 * with k6's error. The lab quotes the most common one when no request succeeded.
 */
export function errorAnswer(response) {
  if (!response.status) return `no answer: ${response.error || "the connection failed"}`.slice(0, ERROR_ANSWER_CHARS);
  let message = String(response.body || "");
  try {
    const answer = JSON.parse(message);
    const error = answer && (answer.error !== undefined ? answer.error : answer.detail);
    if (error !== undefined && error !== null) {
      message = typeof error === "string" ? error : (error.message || JSON.stringify(error));
    }
  } catch (notJson) {
    // not JSON: the body's start is the message
  }
  return `${response.status} ${String(message).replace(/\s+/g, " ").trim()}`.slice(0, ERROR_ANSWER_CHARS);
}

function sendChat(body, streamAsked, tags) {
  metrics.requestsStarted.add(1, tags);
  const response = http.post(`${config.target}/v1/chat/completions`, body, {
    headers: { "Content-Type": "application/json" },
    timeout: config.requestTimeout,
    tags,
  });
  const cacheHeader = response.headers["X-Cache"];
  const cache = cacheHeader === undefined ? undefined : cacheHeader.toUpperCase();
  // A semantic hit (a paraphrase's stored answer) is a hit too.
  if (cache !== undefined) metrics.cacheHits.add(cache === "HIT" || cache === "SEMANTIC", tags);
  if (response.status !== 200) {
    metrics.requestFailures.add(1, { ...tags, lab_error: errorAnswer(response) });
    return null;
  }
  const contentType = String(response.headers["Content-Type"] || "");
  const streamed = contentType.startsWith("text/event-stream");
  let parsed;
  let contentChunks = 0;
  if (streamed) {
    const sse = parseSse(String(response.body || ""));
    if (sse === null || !sse.done) {
      metrics.requestFailures.add(1, { ...tags, lab_error: `${response.status} the stream ended before [DONE]` });
      return null;
    }
    parsed = sse.answer;
    contentChunks = sse.contentChunks;
  } else {
    try {
      parsed = response.json();
    } catch (error) {
      metrics.requestFailures.add(1, { ...tags, lab_error: `${response.status} the answer is not JSON` });
      return null;
    }
  }
  const usage = parsed && parsed.usage;
  if (usage) {
    metrics.inputTokens.add(usage.prompt_tokens || 0, tags);
    metrics.outputTokens.add(usage.completion_tokens || 0, tags);
  } else if (streamed) {
    // A stream without a usage chunk (llama-cpp-python's server): one chunk per token.
    metrics.outputTokens.add(contentChunks, tags);
  }
  if (streamAsked) {
    const timingTags = cache === "HIT" || cache === "MISS" ? { ...tags, cache } : tags;
    const { duration, waiting } = response.timings;
    if (streamed) {
      metrics.ttft.add(waiting, timingTags);
      const tokens = usage && usage.completion_tokens ? usage.completion_tokens : contentChunks;
      if (tokens > 1) metrics.tpot.add((duration - waiting) / (tokens - 1), timingTags);
    } else {
      // Asked for a stream, got one body: its first token is only visible with the last.
      metrics.ttft.add(duration, timingTags);
      metrics.unstreamedAnswers.add(1, tags);
    }
  }
  return parsed;
}

/** Mark the start of an iteration (for the interrupted-iterations count). */
export function iterationStarted() {
  metrics.iterationsStarted.add(1);
}

/** handleSummary: the JSON summary to SUMMARY_PATH, nothing on stdout. */
export function writeSummary(data) {
  return { [config.summaryPath]: JSON.stringify(data, null, 1) };
}
