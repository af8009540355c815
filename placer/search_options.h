// The search's options, torch-free: the single source of every knob's default. The config
// (placer/config/config.h) starts from these values, the search (search.h), the policy
// (policy.h), its learner (learner.h) and refinement (refiner.h) read them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "placer/edit_proposer.h"

namespace placer::search {

// Which network proposes placements (placer/policy_network.h): the 2017/2018 papers' seq2seq LSTM,
// sized by the graph and the machine, or the graph network that fits any graph and device count
// (what `placer pretrain --policy` trains across graphs).
enum class PolicyKind { kLstm, kGraph };
// In enum order (the config's search.policy values).
inline constexpr std::array<std::string_view, 2> kPolicyKindNames = {"lstm", "graph"};

struct PolicyOptions {
  PolicyKind kind = PolicyKind::kLstm;
  // The graph network's (PolicyKind::kGraph): width of its group states and message-passing
  // rounds over the group graph (Placeto uses 8, DOPPLER 6).
  int graph_hidden = 64;
  int message_rounds = 6;
  // Its pretrained weights (empty: none, a fresh network).
  std::filesystem::path pretrained_file;
  int hidden_size = 128;  // encoder output (both directions together)
  int decoder_size = 64;  // decoder state
  int type_embedding_size = 16;
  int option_embedding_size = 16;
  int attention_size = 32;  // keys and values of the attention
  bool bidirectional = true;
  double temperature = 1.0;      // logits are divided by it before the softmax
  double tanh_clip = 0.0;        // > 0: logits = C * tanh(logits / C), as the 2018 planner did
  double locality_prior = 2.0;   // initial weight of the traffic shares in an option's logit
  double incumbent_prior = 2.0;  // initial weight of "the incumbent chose this option"
};

struct LearnerOptions {
  double learning_rate = 0.0005;  // Adam
  int samples_per_step = 64;      // K
  int epochs = 3;                 // PPO epochs per batch
  double clip = 0.2;              // PPO's ratio clip
  double entropy_weight = 0.01;   // per decision, against a policy-gradient term of unit scale
  double max_grad_norm = 1.0;
  double advantage_clip = 3.0;  // normalised advantages beyond +-this are clipped
  // Per decision, the chance of a uniformly drawn choice instead of the policy's (Post's
  // e-uniform mixing): a converged policy keeps proposing new candidates.
  double exploration = 0.02;
};

// How the policy and refinement share the budget after the warm starts, when both search.
//   fixed   policy steps (every refine_every-th followed by a refinement slice from the best
//           sample since the last one) until 1 - final_refine_share of the wall time, then
//           refinement from the best known with the rest;
//   earned  episodes, each either the policy's (refine_every steps and their slice) or
//           refinement's (a slice from the best known), the next one's kind drawn in proportion
//           to the improvement of the best step time per evaluation that each kind has brought
//           lately (EarnedSplitOptions): the policy gets budget as far as its samples pay, and a
//           policy that does not pay costs little more than refinement alone would have spent.
enum class BudgetSplit { kFixed, kEarned };
// In enum order (the config's search.budget_split values).
inline constexpr std::array<std::string_view, 2> kBudgetSplitNames = {"fixed", "earned"};

struct EarnedSplitOptions {
  // Each kind's rate is (gain + prior_gain) / (evaluations + prior_evaluations), the gain being
  // the log-ratio of the best step time before and after its episodes; both sums decay by `decay`
  // per episode, so that what paid early does not hold the budget once it stops paying.
  double prior_gain = 0.001;
  double prior_evaluations = 100;
  double decay = 0.8;
  double min_share = 0.05;  // of the draws, for each kind: neither is ever written off
};

struct ImitationOptions {
  double learning_rate = 0.003;  // of its own Adam (a supervised phase takes larger steps)
  // Stop once the mean per-decision probability of the targets (teacher-forced, weighted) reaches
  // this, or after max_steps.
  double target_probability = 0.9;
  int max_steps = 200;
  // Also train on the targets' decisions where the policy's own sampled decisions lead (samples
  // per target per step): the policy is then led back to the targets from its own mistakes.
  int own_decoding_samples = 2;
};

struct RefinerOptions {
  int neighbours_per_round = 32;  // candidates judged together
  int patience = 3;               // rounds without progress before a kick
  int kick_edits = 3;             // random edits of a kick
};

struct SearchOptions {
  int policy_steps = 1000;       // most policy updates
  int max_evaluations = 100000;  // distinct candidates judged (cache hits are free)
  double max_wall_seconds = 60;  // across resumes
  uint64_t seed = 1;
  double failing_step_seconds = 100;  // an invalid candidate is rewarded as a step this slow
  // What searches: the policy (PPO, self-imitation), refinement, or both (the default). With the
  // policy off, refinement starts from the best warm start and has the whole budget.
  bool use_policy = true;
  bool use_refinement = true;
  BudgetSplit budget_split = BudgetSplit::kEarned;
  EarnedSplitOptions earned_split;
  int refine_every = 5;             // policy steps between refinement slices
  int refine_rounds = 10;           // rounds of a slice
  double final_refine_share = 0.3;  // of max_wall_seconds (and of policy_steps' worth of rounds)
  int final_refine_rounds = 1000;   // most rounds of the final refinement
  int self_imitation_every = 5;     // policy steps between self-imitation passes; 0: never
  int elite_size = 8;               // the fastest distinct candidates kept
  // Imitation of the warm starts before the first step, and of the elite every few steps: a few
  // supervised steps each (each costs about as much as a policy step), enough to move the
  // policy's mass towards them without spending the budget on it.
  ImitationOptions warm_start_imitation = {
      .target_probability = 0.8, .max_steps = 30, .own_decoding_samples = 1};
  double warm_start_imitation_share = 0.15;  // of max_wall_seconds, at most
  ImitationOptions self_imitation = {
      .target_probability = 0.6, .max_steps = 5, .own_decoding_samples = 1};
  PolicyOptions policy;
  LearnerOptions learner;
  RefinerOptions refiner;
  // Which of refinement's edits get judged (edit_proposer.h): uniform, the hand-written estimate,
  // or the learned scorer of `edit_model_file` (which keeps learning from the run's judgements).
  EditProposal edit_proposal = EditProposal::kUniform;
  std::filesystem::path edit_model_file;
  int edit_screening = EditGuide{}.screening;         // edits drawn per edit judged
  int checkpoint_every = 10;                          // policy steps
  const std::atomic<bool>* stop_requested = nullptr;  // set by SIGINT/SIGTERM: checkpoint, stop
};

}  // namespace placer::search
