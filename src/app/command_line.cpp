// command_line.cpp: the pipetrain command line (train, validate, profile, plan, sample, help).
//
// The only translation unit that includes CLI11 (it compiles slowly). Every
// mistake is one pt::InputError carrying a usage hint; --help never exits.
#include "pipetrain/app/command_line.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <string>

#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

const char* const kUsage =
    "usage: pipetrain train DECK [--set section.key=value]... [--resume [PATH|latest|auto]]\n"
    "       pipetrain validate DECK [--set section.key=value]... [--ranks N] [--print-schedule]\n"
    "       pipetrain profile DECK [--set section.key=value]... [--ranks P] [--out FILE] [--reps K]\n"
    "       pipetrain plan DECK [--set section.key=value]... [--ranks P] [--profile FILE | --device h200]\n"
    "                      [--micro-batches N,...] [--schedules NAME,...] [--reps K] [--top K]\n"
    "       pipetrain sample DECK [--set section.key=value]... [--resume PATH] [--prompt TEXT]\n"
    "                      [--tokens N] [--temperature T] [--top-k K] [--seed S] [--tokenizer FILE|bytes] [--ids]\n"
    "       pipetrain --help";

CLI::App* add_deck_command(CLI::App& app, const char* name, const char* what, CommandLine& cl) {
  CLI::App* sub = app.add_subcommand(name, what);
  sub->add_option("DECK", cl.deck_path, "input deck (TOML)")->required();
  sub->add_option("--set", cl.overrides,
                  "override a deck key; the value is TOML (a bare word is a string); repeatable")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  return sub;
}

// A number that is finite: CLI::Range alone lets NaN through (every
// comparison with NaN is false).
CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& text) {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return std::string("expected a number, got " + text);
        return std::isfinite(v) ? std::string() : "expected a finite number, got " + text;
      },
      "FINITE");
}

// An unsigned count or seed: "-1" would wrap to 2^64 - 1 when read.
CLI::Validator no_minus_sign() {
  return CLI::Validator(
      [](std::string& text) {
        return text.find('-') == std::string::npos ? std::string()
                                                   : "expected a number >= 0, got " + text;
      },
      "UINT");
}

// A rank count: a whole number from 1 to 2^16 (CLI::Range alone says "not
// in range" for a word).
CLI::Validator rank_count() {
  return CLI::Validator(
      [](std::string& text) {
        char* end = nullptr;
        const long v = std::strtol(text.c_str(), &end, 10);
        if (end == text.c_str() || *end != '\0' || v < 1 || v > (1L << 16))
          return "expected a whole number of ranks from 1 to 65536, got '" + text + "'";
        return std::string();
      },
      "RANKS");
}

}  // namespace

CommandLine parse_command_line(int argc, char** argv) {
  CommandLine cl;
  CLI::App app{"pipetrain: pipeline-parallel training with MPI (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V or a schedule file)", "pipetrain"};
  app.footer("Example: mpirun -np 4 pipetrain train inputs/mlp.toml --set training.steps=10");
  app.require_subcommand(1, 1);
  CLI::App* train = add_deck_command(app, "train", "train the model described by DECK (one MPI rank per stage)", cl);
  CLI::App* validate = add_deck_command(app, "validate", "check DECK and its schedule without training", cl);
  validate->add_option("--ranks", cl.ranks, "check against N ranks (default: the MPI world size)")
      ->check(rank_count());
  validate->add_flag("--print-schedule", cl.print_schedule, "print the schedule as a rank x step grid");
  CLI::App* profile = add_deck_command(
      app, "profile", "measure the cost of every unit of DECK's model and the link between ranks", cl);
  profile->add_option("--ranks", cl.ranks,
                      "profile for a run on P ranks per node: the deck is checked against P and "
                      "BLAS threads are cores / P (default: the MPI world size)")
      ->check(rank_count());
  profile->add_option("--out", cl.out, "the profile file (default: <output.dir>/profile.h5)");
  profile->add_option("--reps", cl.reps, "timed repetitions of each measurement; times are medians")
      ->check(CLI::Range(1, 1000));
  CLI::App* plan = add_deck_command(
      app, "plan", "predict step time, bubble and memory of DECK and its alternatives, ranked", cl);
  plan->add_option("--ranks", cl.ranks, "plan for P stages (default: the MPI world size)")
      ->check(rank_count());
  CLI::Option* from_file =
      plan->add_option("--profile", cl.profile_path,
                       "costs from a profile.h5 (pipetrain profile) or a trace.h5 instead of "
                       "measuring (its micro-batch size only)");
  plan->add_option("--device", cl.device,
                   "costs from a device description instead of measuring (GPT decks): h200")
      ->excludes(from_file);
  plan->add_option("--micro-batches", cl.micro_batch_counts,
                   "micro-batch counts to weigh (default: every divisor of the batch)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  plan->add_option("--schedules", cl.schedules,
                   "schedules to weigh (default: gpipe, 1f1b and the deck's); interleaved with the "
                   "deck's pipeline.virtual_stages (2 unless it sets one), at N a multiple of P")
      ->delimiter(',')
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"}));
  plan->add_option("--reps", cl.reps, "timed repetitions of each measurement (default: brief, 3)")
      ->check(CLI::Range(1, 1000));
  plan->add_option("--top", cl.top, "rows of the ranked table to print (default 20)")
      ->check(CLI::Range(1, 100000));
  CLI::App* sample = add_deck_command(
      app, "sample", "print text generated by DECK's GPT from a checkpoint (docs/sampling.md)", cl);
  sample->add_option("--resume", cl.resume,
                     "the checkpoint: latest (the default: the newest good one in the deck's "
                     "checkpoint directory), a checkpoint directory or a checkpoint root")
      ->type_name("PATH");
  sample->add_option("--prompt", cl.prompt,
                     "the text to continue (default \"The\"; token ids separated by spaces for "
                     "a deck without a tokenizer, default 0)");
  sample->add_option("--tokens", cl.tokens, "tokens to generate (default 64)")->check(CLI::Range(1, 1 << 20));
  sample->add_option("--temperature", cl.temperature,
                     "softmax temperature; 0 = greedy, the most likely token (default 1)")
      ->check(finite_number())
      ->check(CLI::Range(0.0, 1e6));
  sample->add_option("--top-k", cl.top_k, "sample among the K most likely tokens; 0 = all (default)")
      ->check(CLI::Range(0, 1 << 24));
  sample->add_option("--seed", cl.seed, "seed of the draws: the same seed, the same text (default 1)")
      ->check(no_minus_sign());
  sample->add_flag("--ids", cl.print_ids,
                   "print token ids (the prompt's, then the new ones) instead of text");
  sample->add_option("--tokenizer", cl.tokenizer,
                     "a tokenizer.json, or bytes (default: data.tokenizer, else the one the "
                     "training token files store)");
  CLI::Option* resume =
      train->add_option("--resume", cl.resume,
                        "continue from a checkpoint: latest (the default: the newest good one "
                        "in the checkpoint directory), auto (latest when the checkpoint directory "
                        "holds any checkpoint, else start at step 0: a requeued batch job), a "
                        "checkpoint directory or a checkpoint root")
          ->type_name("[PATH|latest|auto]")
          ->expected(0, 1);
  std::string first = argc > 1 ? argv[1] : "help";
  if (first != "train" && first != "validate" && first != "profile" && first != "plan" &&
      first != "sample" && first != "help" && first[0] != '-') {
    throw InputError("unknown command '" + first +
                     "'; expected train, validate, profile, plan or sample\n" + kUsage);
  }
  if (first[0] == '-' && first != "-h" && first != "--help")
    throw InputError("unknown option '" + first + "' before the command; expected the command first " +
                     "(train, validate, profile, plan or sample), e.g. pipetrain train DECK, or --help\n" + kUsage);
  if (first == "help") {
    cl.command = "help";
    cl.help_text = app.help();
    return cl;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {  // --help, --help-all
    cl.command = "help";
    cl.help_text = app.help();
    return cl;
  } catch (const CLI::ParseError& e) {
    throw InputError(std::string(e.what()) + "\n" + kUsage);
  }
  cl.command = train->parsed()     ? "train"
                : profile->parsed() ? "profile"
                : plan->parsed()    ? "plan"
                : sample->parsed()  ? "sample"
                                    : "validate";
  if (resume->count() > 0 && cl.resume.empty()) cl.resume = "latest";
  if (cl.command == "sample" && cl.resume.empty()) cl.resume = "latest";
  return cl;
}

}  // namespace pt
