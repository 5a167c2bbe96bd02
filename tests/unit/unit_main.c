/* unit_main.c - runs the unit-test cases: `unit` runs all, `unit NAME` runs one. */
#include <stdio.h>
#include <string.h>

#define CASES(X)                                                                                   \
    X(test_float_repr)                                                                             \
    X(test_long_repr)                                                                              \
    X(test_str_repr)                                                                               \
    X(test_bytes_repr)                                                                             \
    X(test_lnotab)                                                                                 \
    X(test_linetable310)                                                                           \
    X(test_locations)                                                                              \
    X(test_linetable_hostile)                                                                      \
    X(test_codecache_pins_entries_of_the_walk)                                                     \
    X(test_version_scan)                                                                           \
    X(test_layout_tables)                                                                          \
    X(test_schedstat_line)                                                                         \
    X(test_debug_offsets)                                                                          \
    X(test_debug_offsets_every_version)                                                            \
    X(test_indirect_call_lengths)                                                                  \
    X(test_batch_merges_and_finds)                                                                 \
    X(test_batch_capacity_and_faults)                                                              \
    X(test_batch_window_search)                                                                    \
    X(test_batch_lookup_of_a_wrapping_range)                                                       \
    X(test_units)                                                                                  \
    X(test_outbox_fills_drops_and_swaps)                                                           \
    X(test_hashid_stable)                                                                          \
    X(test_targets_make_room)                                                                      \
    X(test_identity_of_an_exited_child)                                                            \
    X(test_config_checks_values)                                                                   \
    X(test_config_file_and_reload)                                                                 \
    X(test_mixed_order)                                                                            \
    X(test_sqlmem_budgets)                                                                         \
    X(test_dialect_rewrite)                                                                        \
    X(test_dialect_functions)                                                                      \
    X(test_blocks_round_trip)                                                                      \
    X(test_blocks_split_at_the_stacks_limit)                                                       \
    X(test_blocks_runs)                                                                            \
    X(test_blocks_version_1_and_bad_runs)                                                          \
    X(test_blocks_damaged)                                                                         \
    X(test_nodes_slurm_ranges)                                                                     \
    X(test_desync_first_disagreement)                                                              \
    X(test_desync_nccl_counts)                                                                     \
    X(test_ras_keeps_nccls_fields_only)                                                            \
    X(test_ras_refuses_what_is_not_nccls)                                                          \
    X(test_findproc_job_names)                                                                     \
    X(test_exits_kernel_lines)                                                                     \
    X(test_patterns_bounded)                                                                       \
    X(test_timeline_renders_threads_in_time_order)                                                 \
    X(test_jsontext_shortest_reals)

#define DECLARE(name) int name(void);
CASES(DECLARE)

static const struct {
    const char *name;
    int (*fn)(void);
} cases[] = {
#define ENTRY(name) {#name, name},
    CASES(ENTRY)};

int main(int argc, char **argv)
{
    int passed = 0, failed = 0;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
            continue;
        if (cases[i].fn() == 0) {
            passed++;
        } else {
            failed++;
            fprintf(stderr, "FAIL %s\n", cases[i].name);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed || passed == 0;
}
