// The search's options, torch-free: the single source of every knob's default, and of the
// config's search section: SearchOptions::Fields() declares each key the config sets (key,
// bound, meaning) once, beside the field; the config reader, its key list and configs/SCHEMA.md's
// search table come from it (placer/config). The search (search.h), the policy (policy.h), its
// learner (learner.h) and refinement (refiner.h) read them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

#include "placer/edit_proposer.h"
#include "placer/option_visitor.h"

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

  // The keys of the config's search section that set these options (placer/config/config.h adds
  // the config's own); Check() holds the rules across them.
  void Fields(OptionVisitor& v);
  std::optional<graph::FieldError> Check() const;
};

inline void SearchOptions::Fields(OptionVisitor& v) {
  v.Positive("max_wall_seconds", max_wall_seconds,
             "wall-clock budget of the planning: the set-up (the model at every replica count, "
             "profiles, baselines) and the search (at least a tenth of it); the final measurements "
             "come on top. With `budget_split: fixed`, 30% of the search's share goes to the final "
             "refinement when both parts run. It counts across resumes (each resume's set-up on "
             "top)");
  v.Int("policy_steps", policy_steps, 0, "most policy updates");
  v.Int("samples_per_step", learner.samples_per_step, 2,
        "candidates the policy samples per update (K)");
  v.Int("max_evaluations", max_evaluations, 1,
        "most distinct candidates judged (a candidate judged before costs nothing)");
  v.Bool("policy", use_policy, "learn with the policy (PPO, self-imitation)");
  v.Constraint("policy", "not both false");
  v.Bool("refinement", use_refinement,
         "refine by local search (move a group, a band or a segment of groups, shift a stage "
         "boundary, swap segments, change the replica count; iterated with random kicks)");
  v.Constraint("refinement", "not both false");
  v.Int("refinement_rounds", final_refine_rounds, 0,
        "most rounds of the final refinement, or of refinement's episodes with the earned split "
        "(each judges up to 32 neighbours at once)");
  v.OneOf("budget_split", budget_split, kBudgetSplitNames,
          "how the policy and refinement share the search's budget when both run: `fixed` (the "
          "default before 2026-12-04) gives the policy's steps (a refinement slice from its best "
          "sample every 5 steps) 70% of the wall time and the final refinement the rest; "
          "`earned` runs episodes, each the policy's (5 steps and their slice) or refinement's "
          "(10 rounds from the best known), drawing the next one's kind in proportion to the "
          "improvement per evaluation each kind has brought lately (each at least 5% of the "
          "draws); rounds of refinement's episodes count against `refinement_rounds`");
  v.OneOf("policy_network", policy.kind, kPolicyKindNames,
          "the policy's network: `lstm`, the seq2seq network of the 2017/2018 papers (its weights "
          "sized by the graph and the machine), or `graph`, a graph network over the groups "
          "(message passing along producer and consumer edges; options scored from their loads, "
          "traffic and a list-scheduling finish estimate) whose one set of weights places any "
          "graph on any device count, so that it can be pretrained across graphs "
          "(`placer/graph_policy.h`)");
  v.Path("policy_file", policy.pretrained_file,
         "the graph policy's pretrained weights, relative to the config's directory; a file of "
         "another version or size is refused naming both");
  v.Constraint("policy_file",
               "a file `PretrainPolicy` wrote (`bench/graph_policy_bench pretrain`); only with "
               "`policy_network: graph`");
  v.OneOf("edit_proposer", edit_proposal, kEditProposalNames,
          "which of refinement's random edits get judged: `uniform` judges them as drawn; "
          "`estimate` draws `edit_screening` times as many, judges the three quarters of a "
          "round's share that a hand-written estimate ranks best (the busiest device's load and "
          "the traffic's seconds) and fills the last quarter uniformly from the rest; `schedule` "
          "ranks them by a group-level list schedule of the step (`placer/group_schedule.h`: "
          "the critical path and the slack); `learned` "
          "ranks them by the scorer `placer pretrain` trains, which keeps learning from the "
          "search's own judgements. In `compare`, refinement alone keeps uniform edits and a row "
          "\"refinement alone, <proposer> edits\" is added");
  v.Constraint("edit_proposer", "`learned` needs `edit_model`");
  v.Path("edit_model", edit_model_file,
         "the learned proposer's scorer; a file of another placer version or shape is refused");
  v.Constraint("edit_model",
               "a file `placer pretrain` wrote (its `edit_model.pt`), relative to the config's "
               "directory");
  v.Int("edit_screening", edit_screening, 1,
        "edits drawn per edit judged, with `estimate`, `schedule` or `learned`");
  v.Unsigned("seed", seed, "seed of the policy and of refinement");
  v.Int("checkpoint_every", checkpoint_every, 1,
        "save the search state every this many policy steps (and after every chunk of the final "
        "refinement)");
  v.Positive("failing_step_seconds", failing_step_seconds,
             "an invalid placement (out of memory, failing op, time limit) is rewarded as a step "
             "this slow: reward -sqrt(100) = -10, as the hierarchical planner did");
  v.Positive("learning_rate", learner.learning_rate,
             "Adam step size of the PPO updates (imitation uses its own, 0.003)");
  v.NonNegative("entropy_weight", learner.entropy_weight,
                "weight of the entropy bonus, per decision (the policy-gradient term is averaged "
                "over the same decisions)");
  v.Int("ppo_epochs", learner.epochs, 1, "PPO epochs over each batch of samples");
  v.Int("hidden_size", policy.hidden_size, 2,
        "size of the policy's encoder state (the bidirectional encoder splits it)");
  v.Constraint("hidden_size", "even");
  v.Positive("temperature", policy.temperature,
             "the policy's logits are divided by it before the softmax");
  v.NonNegative("tanh_clip", policy.tanh_clip,
                "C in C*tanh(logits/C); 0 turns clipping off (the 2018 planner used 5)");
}

inline std::optional<graph::FieldError> SearchOptions::Check() const {
  if (policy.hidden_size % 2 != 0) {
    return graph::FieldError{{"hidden_size"}, "must be even (the bidirectional encoder splits it)"};
  }
  if (!use_policy && !use_refinement) {
    return graph::FieldError{{"policy", "refinement"},
                             "the search needs the policy or refinement (or both)"};
  }
  if (!policy.pretrained_file.empty() && policy.kind != PolicyKind::kGraph) {
    return graph::FieldError{{"policy_file"},
                             "a pretrained policy file is read by the graph policy only "
                             "(search.policy_network: graph)"};
  }
  if (edit_proposal == EditProposal::kLearned && edit_model_file.empty()) {
    return graph::FieldError{
        {"edit_proposer"},
        "the learned proposer needs search.edit_model (a file `placer pretrain` wrote, such as "
        "configs/edit_model.pt)"};
  }
  return std::nullopt;
}

}  // namespace placer::search
