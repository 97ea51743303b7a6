// Workload replay (`sharegpt-chat` and `custom`): replays requests prepared by the lab.
//
// REQUESTS_FILE is a JSON file written by the lab: an array of sessions, each session an
// array of turns, each turn the full request `messages` list (system prompt plus the
// conversation up to and including the i-th user message); a turn may also be an object
// `{"messages": [...], ...}` whose other keys (max_tokens, temperature...) go into the
// request as they are. A custom JSONL workload is one turn per session.
//
// Each VU iteration takes the next session (in file order, shared by all VUs through
// k6/execution's iterationInTest, wrapping around) and sends its turns one after the
// other; each request is tagged `turn` (0-based). Options from __ENV (see lib.js).

import { SharedArray } from "k6/data";
import exec from "k6/execution";
import { buildOptions, checkHealth, iterationStarted, postChat, writeSummary } from "./lib.js";

const REQUESTS_FILE = __ENV.REQUESTS_FILE;
if (!REQUESTS_FILE) throw new Error("REQUESTS_FILE is required (a JSON array of sessions)");

const sessions = new SharedArray("sessions", function loadSessions() {
  const parsed = JSON.parse(open(REQUESTS_FILE));
  if (!Array.isArray(parsed) || parsed.length === 0) {
    throw new Error(`${REQUESTS_FILE} must hold a non-empty JSON array of sessions`);
  }
  parsed.forEach((session, index) => {
    if (!Array.isArray(session) || session.length === 0) {
      throw new Error(`${REQUESTS_FILE}: session ${index} must be a non-empty array of turns`);
    }
  });
  return parsed;
});

export const options = buildOptions();

export function setup() {
  return checkHealth();
}

export default function () {
  iterationStarted();
  const session = sessions[exec.scenario.iterationInTest % sessions.length];
  for (let turn = 0; turn < session.length; turn += 1) {
    // A failed turn still lets the session go on: the assistant turns come from the file.
    postChat(session[turn], { turn: String(turn) });
  }
}

export function handleSummary(data) {
  return writeSummary(data);
}
