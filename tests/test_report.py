"""The sweep report's plots: each line named so that it can be told from the others."""


def test_plots_name_jobs_their_label_cannot_tell_apart_by_their_folders():
    from multigpu.tools.report.summary import row_labels

    same = {"strategy": "single", "devices": 1, "batch_size": 256, "lr": 0.1}
    rows = [{**same, "job": "width_8"}, {**same, "job": "width_16"}]
    rows.append({**same, "lr": 0.2, "job": "lr_0.2"})
    assert row_labels(rows) == ["width_8", "width_16", "single x1, batch 256, lr 0.2"]
