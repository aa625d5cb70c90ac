"""The distilled run's report: the usual run report plus teacher vs student numbers and a comparison plot."""

from __future__ import annotations

from ptmlab.core.rundir import RunDir
from ptmlab.report.run_report import write_run_report


def write_distill_report(run: RunDir) -> str:
    s = run.summary()

    def section(rep) -> None:
        from ptmlab.report.plots import bar_plot

        main = s["main_metric"]
        rep.heading("Teacher vs student")
        rep.table([{"model": f"teacher ({s['teacher']})", main: s["teacher_metrics"].get(main),
                    "params": s["teacher_params"], "layers": s["teacher_layers"], "agreement": 1.0},
                   {"model": f"student ({s['model']})", main: s["metrics"].get(main), "params": s["params"],
                    "layers": s["layers"], "agreement": s["agreement_with_teacher"]}])
        rep.text(f"The student keeps {s['retained_pct']}% of the teacher's dev {main} and agrees with the teacher "
                 f"on {100 * s['agreement_with_teacher']:.1f}% of dev examples; losses: {s['losses']}, layer map "
                 f"{s['layer_map']}; teacher outputs {s['teacher_cache']}.")
        rep.table([{"loss": k, "final value": v} for k, v in s.get("final_losses", {}).items()])
        fig = bar_plot(["teacher", "student"], [s["teacher_metrics"].get(main, 0), s["metrics"].get(main, 0)],
                       f"dev {main}", "teacher vs student")
        rep.figure(fig, "teacher_vs_student", "dev metric of teacher and student")

    return write_run_report(run, [section])
