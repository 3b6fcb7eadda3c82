// Synthetic KV-cache traces for gpucache-replay, in the Mooncake format (replay.h), generated
// from documented parameters and a seed: the same kind and seed give the same trace, byte for
// byte, on every machine (std::mt19937_64 and distributions written out here, not the
// standard library's, whose algorithms are implementation-defined).
//
// Two kinds (docs/eviction.md, "Traces"):
//   "multi-turn"  chat conversations: a shared system prompt, turns that re-send the whole
//                 conversation plus the model's answer and a new message after a think time,
//                 conversations that end after a few turns (more likely to go on the longer
//                 they have), and edits that branch a conversation off an earlier turn.
//   "agent"       tool-using agents: a long shared tool prompt per agent type, sessions of many
//                 short steps (each appends the model's action and a tool result a few seconds
//                 later), some sessions forking sub-agents that share the session's prefix.
//
// Block ids are 1 + a counter, one per distinct block content; every request's last block is
// partial unless its length is a multiple of 512 tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/bench/replay.h"

namespace gpucache::replay {

struct MultiTurnParams {
  double duration_s = 3600;          // trace length
  double conversations_per_s = 2.0;  // Poisson arrivals of new conversations
  int system_prompts = 4;            // shared prompts, picked with Zipf(1) weights
  int system_prompt_blocks_max = 2;  // each 1..max full blocks
  // A share of conversations start from a shared document (a long context many users ask
  // about) after the system prompt: one of `documents`, 2..document_blocks_max full blocks,
  // picked with Zipf(1) weights over ranks that shift by one every document_period_s (what is
  // popular changes).
  double document_share = 0.35;
  int documents = 300, document_blocks_max = 40;
  double document_period_s = 60;
  double first_message_median = 4000, first_message_sigma = 1.1;  // tokens, lognormal
  double message_median = 600, message_sigma = 1.3;               // later user messages
  double answer_median = 400, answer_sigma = 0.8;                 // model answers (output)
  double decode_tokens_per_s = 40;                                // answer time
  double think_median_s = 60, think_sigma = 1.1;                  // user think time
  // Chance that a conversation goes on after its k-th turn: continue_base + continue_gain *
  // (1 - exp(-k / continue_scale)).
  double continue_base = 0.3, continue_gain = 0.45, continue_scale = 3;
  double edit_probability = 0.05;  // a turn edits the previous message instead (a branch)
  uint32_t max_context = 65536;    // a conversation stops when its prompt would pass this
};

struct AgentParams {
  double duration_s = 3600;
  double sessions_per_s = 0.4;
  int agent_types = 5;                   // tool prompt of type t: tool_prompt_blocks * (t + 1) / 2
  int tool_prompt_blocks = 12;
  double task_median = 800, task_sigma = 0.8;
  double action_median = 150, action_sigma = 0.7;  // model output per step
  double result_median = 1500, result_sigma = 1.3;  // tool result per step (capped at 16k)
  double decode_tokens_per_s = 40;
  // Tool latency: mostly seconds, with a long tail (builds, searches, a human's approval).
  double tool_latency_median_s = 6, tool_latency_sigma = 1.6;
  double step_continue = 0.9;            // chance of one more step (mean 10 steps)
  double fork_probability = 0.1;         // a session forks 2-3 sub-agents at a random step
  uint32_t max_context = 131072;
};

// "multi-turn" or "agent"; throws std::invalid_argument for another name.
std::vector<Request> GenerateTrace(const std::string& kind, uint64_t seed);
std::vector<Request> GenerateMultiTurn(const MultiTurnParams& p, uint64_t seed);
std::vector<Request> GenerateAgent(const AgentParams& p, uint64_t seed);
// One JSON object a line, as LoadTrace reads it.
std::string ToJsonl(const std::vector<Request>& trace);

}  // namespace gpucache::replay
