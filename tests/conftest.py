"""Shared fixtures: the CLI run in-process with its real error boundary, and tiny real model configs; and the test
tiers: the markers slow, subprocess, ray and browser applied here, in one place (CONTRIBUTING.md, "Test tiers")."""
from __future__ import annotations

import fnmatch
import inspect
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

# Human output is checked as text: give every run the same wide terminal, whatever the machine's COLUMNS.
os.environ["COLUMNS"] = "200"


@pytest.fixture(autouse=True)
def _records_in_tmp(tmp_path, monkeypatch):
    """Run records (campaign run, a final-test use) go to the test's own folder, never the repository's .campaign."""
    monkeypatch.setenv("CAMPAIGN_ROOT", str(tmp_path / ".campaign"))


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli(capsys):
    """Run `campaign ARGS` through campaign.cli.main; returns exit code, stdout, stderr."""
    from campaign.cli import main

    def run(*args: str) -> Result:
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def tiny_llama(**overrides) -> dict:
    """A real Llama config, small enough to build and run on CPU."""
    cfg = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64, intermediate_size=160,
               num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, vocab_size=1000,
               max_position_embeddings=256, tie_word_embeddings=False, torch_dtype="bfloat16")
    cfg.update(overrides)
    return cfg


@pytest.fixture
def write_config(tmp_path):
    """Write a config dict as <tmp>/<name>/config.json and return the dir."""

    def write(cfg: dict, name: str = "model") -> Path:
        d = tmp_path / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        return d

    return write


# Tests that took 2 s or more on 2 cores (pytest --durations=0, setup included, December 2026), by function name
# so that a test keeps its mark when its file moves; a pattern with [...] marks some parameters of a test (a README
# example by its command). `make test-fast` deselects them, `make test` runs them. Two guards under 3 s stay fast
# on purpose: the import-cycle check (tests/test_layout.py) and the kill at every step of a first split.
SLOW = frozenset("""
test_the_resume_test_keeps_every_file_it_did_not_write
test_killed_during_the_fresh_process_the_next_run_finds_its_records_and_cleans_up
test_sigterm_during_training_ends_the_run_stopped
test_an_exception_in_training_fails_the_run_though_the_script_catches_it
test_a_script_failing_after_training_leaves_the_run_completed
test_an_interrupted_check_leaves_no_torchrun_worker_running
test_a_rank_that_dies_is_named_not_the_rank_that_lost_its_connection
test_a_rank_that_ends_badly_after_the_result_is_complete_does_not_fail_the_check
test_a_kill_at_every_step_of_a_forced_hf_resplit_keeps_the_old_dict_or_the_new
test_the_real_command_killed_while_it_writes_the_dataset_dict
test_a_kill_at_every_step_of_a_first_hf_split_leaves_nothing_or_the_whole_dict
test_without_the_compiled_model_the_python_one_passes_the_same_tests
test_a_zero2_entry_takes_deepspeed_defaults_for_what_its_ds_config_leaves_out
test_fsdp_accumulation_holds_whole_gradients_as_the_trainer_runs_it
test_with_accumulation_the_forward_holds_the_summed_gradients_beside_the_estimate
test_trace_with_grad_accumulation_holds_the_summed_gradients_through_the_forward
test_an_unreadable_hf_cache_ref_falls_back_to_the_newest_snapshot
test_every_json_reader_refuses_every_broken_file_in_one_line
test_a_terminal_sees_the_spinner_and_json_does_not
test_trace_without_a_card_gives_the_fit_line_memory_gives
test_a_calibrated_format_runs_on_the_cpu_and_names_its_calibration_data
test_dedup_scale_dry_run_times_each_engine_on_the_same_rows
test_a_kill_at_every_step_of_a_forced_resplit_keeps_the_old_set_or_the_new_one
test_the_real_command_killed_at_steps_spread_over_its_run
test_cli_explain_on_a_cpu_measurement
test_a_larger_batch_never_needs_less_where_the_traced_step_does_not
test_replayed_overhead_with_checkpointing_is_near_the_trace_of_the_real_step
test_the_solve_gives_the_exhaustive_answers_on_the_sweep_but_the_listed_steps
test_trace_and_formula_agree_per_phase
test_trace_and_formula_agree_per_phase_for_each_family
test_t5_is_modelled_traced_and_measured_as_a_seq2seq_step
test_gpu_check_dry_run_writes_every_workload
test_gpu_quant_check_dry_run_compares_the_cpu_formats
test_gpu_train_check_dry_run_passes_on_the_cpu_setups
test_readme_quant_examples_print_the_same_on_every_kernel_path
test_the_readme_python_block_runs
test_readme_example_prints_what_it_shows[*-batch]
test_readme_example_prints_what_it_shows[*-check]
test_readme_example_prints_what_it_shows[*-quant]
test_readme_example_prints_what_it_shows[*-trace]
test_eight_processes_logging_at_once_lose_nothing
test_sigterm_runs_the_users_own_handler_first
test_the_per_micro_batch_mean_fails_on_variable_lengths_and_per_token_passes
test_two_processes_under_torchrun_reduce_token_counts_across_processes
test_check_on_the_lora_example_binds_and_reloads_the_adapter
test_check_refuses_the_adapter_on_a_base_built_differently
test_a_checkpoint_that_does_not_save_or_reload_fails_its_check_not_the_command
test_a_loop_that_forgets_the_generator_fails_the_next_step
test_a_loop_that_forgets_the_optimizer_fails_the_next_update
test_a_loop_that_forgets_the_scheduler_fails_the_next_update
test_a_loop_that_loses_the_buffers_fails_the_reloaded_weights
test_campaigns_own_checkpoint_resumes_bitwise_in_a_fresh_process
test_cli_exit_codes_json_and_the_saved_record
test_the_resume_runs_in_a_fresh_process_that_builds_the_setup_itself_and_progress_names_each_check
test_the_worked_example_passes
test_one_workload_estimated_traced_and_measured_is_drawn_side_by_side
test_the_bundle_holds_the_accepted_run_rehashed_with_its_limits
test_the_report_holds_every_question_the_records_and_what_is_missing
test_a_record_of_an_unexpected_shape_is_listed_not_fatal
test_the_report_fetches_nothing
test_a_correct_trainer_run_is_recorded_and_passes
test_a_warmup_at_rate_zero_is_not_verified_never_ready
test_a_module_declared_to_train_but_frozen_fails
test_nan_gradients_fail_and_stop_training
test_an_exception_marks_the_run_failed_with_its_reason
test_a_plain_module_passes_and_its_frozen_layer_stays
test_a_frozen_layer_that_moves_fails
test_lora_passes_though_a_moves_only_from_the_second_step
test_a_lora_layer_left_out_of_the_optimizer_fails
test_the_example_trainer_script_records_and_checks_its_run
test_a_correct_lightning_run_is_recorded_and_passes
test_a_warmup_at_rate_zero_is_not_verified
test_a_layer_declared_to_train_but_frozen_fails
test_an_exception_in_the_step_marks_the_run_failed
test_an_hf_model_inside_a_lightning_module_passes
test_two_ranks_make_one_run_with_both_ranks_records
test_the_rank_that_failed_is_named_as_the_root_cause_not_rank_0
test_the_comparison_is_made_again_from_the_bundle_alone
test_a_kill_at_any_step_of_force_leaves_a_whole_export[*]
test_a_kill_during_a_forced_resplit_leaves_the_old_dict_or_the_new
test_folds_keep_groups_and_near_duplicates_whole
test_scikit_learn_takes_it_as_cv
test_two_calibration_sets_are_each_fitted_and_compared
test_equivalence_of_accuracy_in_points_in_the_cli
test_a_variant_that_overflows_to_nan_fails_and_exits_1
test_equivalence_at_a_margin_matches_statsmodels
test_a_precision_listed_as_a_variant_is_cast_to_it
test_a_nan_reference_fails_quant_finite_without_guards
test_the_reference_precision_of_a_bf16_model_listed_as_fp32_is_converted
test_awq_whose_every_scale_is_1_says_it_is_int8
test_the_installed_peft_gives_the_adapters_the_dtype_the_estimate_counts
test_config_files_give_the_workload_and_the_command_line_wins
test_wrong_typed_fields_in_every_record_kind_are_listed_not_fatal
test_a_check_and_a_quant_record_name_their_verdict_setup_and_model
test_every_record_is_shown_grouped_newest_first_with_its_command_line
test_regress_shows_mcnemar_and_the_per_class_deltas
test_split_usage_runs_and_budget_show_what_their_records_hold
test_two_confusion_matrices_are_told_apart
test_print_keeps_headings_with_what_follows_and_no_title_page
test_headless_chromium_shows_every_record_with_its_command_line
test_per_sequence_backward_matches_the_tracked_step
test_one_card_checkpointed_backward_matches_the_tracked_step
test_a_checkpoint_without_the_scheduler_fails_at_the_update_after
test_a_checkpoint_without_the_random_generators_fails_at_the_next_update
test_the_resume_test_uses_the_trainers_own_checkpoint
test_check_on_a_correct_trainer_is_ready
test_batch_runs_the_trainers_own_accumulation
test_the_trainers_own_objects_are_what_is_checked
test_check_on_a_lightning_module_with_its_dataloader
test_the_example_lightning_script_records_and_checks_its_run
test_llama_phases_from_its_shapes_and_beside_the_estimate
test_a_loop_that_keeps_a_copy_of_the_weights_each_step_is_off_the_estimate
test_generators_saved_and_set_back_at_an_epoch_end_resume_bitwise
test_generators_not_set_back_fail_at_the_next_update
test_a_plain_dataloader_resumed_mid_epoch_fails_at_the_next_update
test_torchrun_runs_the_users_accumulate_and_a_local_token_count_is_not_equivalent
test_torchrun_a_globally_normalized_accumulate_is_equivalent
test_torchrun_a_failing_rank_names_the_users_function_and_rank
test_torchrun_runs_an_hf_trainers_own_step_on_its_sharded_batches
test_torchrun_the_example_step_keeps_the_ranks_in_sync
test_torchrun_a_tensor_beside_the_model_drifts_apart
test_watch_clean_gpt_passes_every_check
test_watch_without_checkpoint_is_not_verified
test_watch_names_the_checkpoint_but_does_not_go
test_watch_model_left_in_eval_after_evaluation
test_watch_without_zero_grad
test_watch_scheduler_stepped_per_micro_batch
test_watch_decoder_without_causal_mask
test_watch_targets_not_shifted
test_watch_trainable_parameter_left_out_of_the_optimizer
test_watch_stops_a_script_that_never_steps
test_watch_bad_commands_are_one_line
test_watch_hf_model_clean
test_watch_hf_labels_shifted_twice
test_watch_peft_lora_frozen_base
test_watch_through_the_hf_trainer_clean
test_watch_through_accelerate_clean
test_check_dash_dash_python_runs_the_script
test_watch_non_finite_loss
test_watch_frozen_parameter_that_moves
test_a_run_out_of_memory_is_a_measured_failure_in_measure_and_explain
test_watch_resume_clean_gpt
test_watch_resume_that_restarts_the_data_order
test_watch_resume_that_drops_the_optimizer_state
test_watch_resume_that_drops_the_scheduler
test_watch_resume_with_arguments_that_do_not_resume
test_watch_resume_without_arguments_says_how
test_check_resume_args_on_the_command_line
test_watch_resume_through_the_hf_trainer
test_watch_resume_through_the_hf_trainer_that_restarts_the_data
test_remote_code_is_refused_saying_what_is_missing
test_watch_accumulation_clean_gpt
test_watch_accumulation_loss_not_divided_by_the_steps
test_watch_accumulation_hf_token_weighted_clean
test_watch_accumulation_peft_token_weighted_clean
test_watch_accumulation_hf_mean_of_means
test_no_printed_page_holds_a_heading_alone
test_watch_fed_batches_clean
test_watch_fed_batches_truncation_cuts_answers
test_watch_fed_batches_loss_on_padding
test_watch_fed_batches_mask_over_padding
test_watch_fed_batches_through_the_trainer[64]
test_watch_fed_batches_through_the_trainer[10]
test_watch_plain_script_saving_into_a_checkpoint_folder_is_not_taken_for_a_trainer
test_watch_accumulation_lightning_clean
test_watch_resume_peft_lora_clean
test_resnet50_phases_match_a_cpu_measurement
test_vit_phases_match_a_cpu_measurement
test_diffusion_unet_phases_match_a_cpu_measurement
test_torchvision_resnet50_phases_match_a_cpu_measurement
test_watch_sft_lora_clean
test_watch_sft_max_length_cuts_every_answer
test_watch_sft_labels_shifted_twice
test_watch_lightning_clean[2]
test_watch_lightning_clean[1]
test_watch_lightning_model_left_in_eval
test_watch_lightning_zero_grad_that_does_nothing
test_watch_lightning_scheduler_stepped_per_batch
test_catalog_count_equals_transformers_meta_count[ai21labs/AI21-Jamba-1.5-Mini]
test_catalog_count_equals_transformers_meta_count[Qwen/Qwen2.5-VL-7B-Instruct]
test_parameter_count_equals_transformers_on_the_meta_device
test_watch_ranks_clean
test_watch_ranks_fed_the_same_data
test_check_processes_model_not_wrapped_in_ddp
test_grad_is_mean_clean[plain]
test_grad_is_mean_clean[accumulating]
test_grad_is_mean_sum_not_divided
test_grad_is_mean_no_sync_everywhere
test_grad_is_mean_loss_divided_by_world_size
test_accelerate_loop_clean_under_two_processes
test_accelerate_dataloader_not_prepared_feeds_every_rank_the_same_batches
test_accelerate_scheduler_not_prepared_steps_per_micro_batch
test_trainer_clean_under_two_processes
test_trainer_gradient_clipping_is_no_false_alarm
test_trainer_plain_dataloader_feeds_every_rank_the_same_batches
test_trainer_ranks_with_different_token_counts_is_no_false_alarm
test_trainer_tokens_not_averaged_across_devices
test_campaign_check_takes_the_setups_loss_field_on_the_plain_model
test_a_nanogpt_loop_weighing_every_target_alike_passes
test_batch_cli_exits_0_on_the_plain_loop_and_1_on_its_loss_over_steps
test_resume_ranks_clean_ddp_loop_saving_on_rank_0
test_resume_ranks_batches_already_trained_on_not_skipped
test_resume_ranks_optimizer_state_not_loaded
test_resume_ranks_without_resume_args_is_not_verified
test_resume_ranks_without_a_checkpoint_is_not_verified
test_resume_ranks_trainer_checkpoint
test_resume_ranks_trainer_ignore_data_skip
test_accelerate_gradient_clipping_by_norm_and_by_value
test_op_policy_matches_what_selective_checkpointing_keeps_on_a_real_layer
test_layer_split_is_accelerates
""".split())
_SLOW_PARAMETERS = tuple(p.replace("[", "[[]", 1) for p in SLOW if "[" in p)  # fnmatch's literal [
BROWSER = frozenset({"test_headless_chromium_renders_the_report",
                     "test_headless_chromium_shows_every_record_with_its_command_line",
                     "test_no_printed_page_holds_a_heading_alone"})
_RAY = re.compile(r"importorskip\(\"ray\"\)|^import ray\b|^from ray\b", re.M)
_STARTS_PROCESSES = re.compile(r"\bsubprocess\.|\bPopen\(|\bos\.fork\(|\btorchrun\b|_killed_at\(|_run_killed_at\(")


def pytest_collection_modifyitems(config, items):
    """Mark each test by its tier: slow (the measured list), ray (the local_ray fixture, or a module that needs Ray),
    browser (headless Chromium) and subprocess (its own source starts a process)."""
    sources: dict[object, str] = {}
    for item in items:
        name = getattr(item, "originalname", item.name)
        function = getattr(item, "function", None)
        if name in SLOW or any(fnmatch.fnmatchcase(item.name, pattern) for pattern in _SLOW_PARAMETERS):
            item.add_marker(pytest.mark.slow)
        if name in BROWSER:
            item.add_marker(pytest.mark.browser)
        module = getattr(item, "module", None)
        if "local_ray" in getattr(item, "fixturenames", ()) or _RAY.search(_source(module, sources)):
            item.add_marker(pytest.mark.ray)
        if _STARTS_PROCESSES.search(_source(function, sources)):
            item.add_marker(pytest.mark.subprocess)


def _source(obj: object, cache: dict[object, str]) -> str:
    """The source of a test function or module ('' when there is none), read once per collection."""
    if obj is None:
        return ""
    if obj not in cache:
        try:
            cache[obj] = inspect.getsource(obj)  # type: ignore[arg-type]
        except (OSError, TypeError):
            cache[obj] = ""
    return cache[obj]
