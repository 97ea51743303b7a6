// Trace replay (`trace`): each request of a trace sent at its time, never earlier.
//
// REQUESTS_FILE is the lab's request file (see chat_replay.js): one one-turn session per
// trace request, in time order, its turn an object `{"at_ms": ..., "messages": [...], ...}`:
// `at_ms` is when to send it, in ms after the scenario starts (the trace's timestamp over the
// speed-up); the other keys go into the request as they are (max_tokens and the backend's
// way of fixing the output length).
//
// One shared-iterations scenario: iteration i sends request i. A VU takes the next request
// as soon as it is free, builds its body, sleeps until the request's time and sends it, so
// TRACE_VUS is the most requests waiting or in flight at once (load.max_vus). The scenario
// stops starting requests at TRACE_DURATION; those in flight get GRACEFUL_STOP to finish.
//
// Lateness: `lab_trace_lateness` (ms, a Trend) is each request's send time less its time
// in the trace; `lab_trace_late` counts those more than LATE_MS late: the load generator
// could not keep the schedule (too few VUs, or too little CPU).

import { sleep } from "k6";
import { SharedArray } from "k6/data";
import exec from "k6/execution";
import { Counter, Trend } from "k6/metrics";
import { buildOptions, checkHealth, iterationStarted, postPrepared, preparedChat, writeSummary } from "./lib.js";

const REQUESTS_FILE = __ENV.REQUESTS_FILE;
if (!REQUESTS_FILE) throw new Error("REQUESTS_FILE is required (the lab's trace request file)");
const LATE_MS = 50;

const requests = new SharedArray("trace", function loadTrace() {
  const parsed = JSON.parse(open(REQUESTS_FILE));
  if (!Array.isArray(parsed) || parsed.length === 0) {
    throw new Error(`${REQUESTS_FILE} must hold a non-empty JSON array of sessions`);
  }
  return parsed.map((session, index) => {
    const turn = Array.isArray(session) ? session[0] : undefined;
    if (!turn || typeof turn.at_ms !== "number") {
      throw new Error(`${REQUESTS_FILE}: session ${index} must be one turn with a numeric at_ms`);
    }
    return turn;
  });
});

const lateness = new Trend("lab_trace_lateness", true);
const late = new Counter("lab_trace_late");

function traceOptions() {
  const options = buildOptions();
  const vus = parseInt(__ENV.TRACE_VUS || "64", 10);
  options.scenarios = {
    load: {
      executor: "shared-iterations",
      vus: Math.max(1, Math.min(vus, requests.length)),
      iterations: requests.length,
      maxDuration: __ENV.TRACE_DURATION || "60s",
      gracefulStop: __ENV.GRACEFUL_STOP || "30s",
    },
  };
  options.thresholds.lab_trace_lateness = ["max>=0"];
  return options;
}

export const options = traceOptions();

export function setup() {
  return checkHealth();
}

export default function () {
  iterationStarted();
  const turn = requests[exec.scenario.iterationInTest];
  const request = {};
  for (const key of Object.keys(turn)) {
    if (key !== "at_ms") request[key] = turn[key];
  }
  const prepared = preparedChat(request);
  const due = exec.scenario.startTime + turn.at_ms;
  // sleep never returns early; Date.now() has whole ms, so wait until it reads the due ms.
  for (let wait = due - Date.now(); wait > 0; wait = due - Date.now()) sleep(wait / 1000);
  const lateMs = Date.now() - due;
  lateness.add(lateMs);
  if (lateMs > LATE_MS) late.add(1);
  postPrepared(prepared);
}

export function handleSummary(data) {
  return writeSummary(data);
}
