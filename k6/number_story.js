// Workload `number-story`: the seed's request, "Write a short story about the number ${n}."
// with n = floor(random() * PROMPTS), random() seeded by SEED_BASE + VU id.
// Options from __ENV (see lib.js), plus PROMPTS (50).

import { buildOptions, checkHealth, iterationStarted, postChat, vuRng, writeSummary } from "./lib.js";

const PROMPTS = parseInt(__ENV.PROMPTS || "50", 10);
if (!(PROMPTS > 0)) throw new Error(`PROMPTS must be a positive integer, got "${__ENV.PROMPTS}"`);

export const options = buildOptions();

export function setup() {
  return checkHealth();
}

export default function () {
  iterationStarted();
  const n = Math.floor(vuRng()() * PROMPTS);
  postChat([{ role: "user", content: `Write a short story about the number ${n}.` }]);
}

export function handleSummary(data) {
  return writeSummary(data);
}
