//! The `hdas-paper` scenario: its workloads, its profiles against the paper's stated facts, and
//! the paper's headline ordering on the full experiment.

use hetsched_core::testkit::ScratchDir;
use hetsched_sim::scenario::hdas_paper::profiles::{DISK_MIB_S, PROFILES};
use hetsched_sim::scenario::hdas_paper::{self, HdasPaperOptions, workloads};

#[test]
fn workloads_are_lettered_as_in_the_paper() {
    let w = workloads();
    let names: Vec<(char, String)> = w.iter().map(|w| (w.letter, w.name())).collect();
    let find = |c: char| names.iter().find(|(l, _)| *l == c).map(|(_, n)| n.as_str());
    assert_eq!(w.len(), 25);
    assert_eq!(find('A'), Some("KNN+Kmeans"));
    assert_eq!(find('B'), Some("KNN+RS"));
    assert_eq!(find('C'), Some("KNN+NB"));
    assert_eq!(find('I'), Some("RS+BP"));
    assert_eq!(find('J'), Some("NB+BP"));
    assert_eq!(find('K'), Some("KNN+Kmeans+RS"));
    assert_eq!(find('L'), Some("KNN+Kmeans+NB"));
    assert_eq!(find('P'), Some("KNN+NB+BP"));
    assert_eq!(find('T'), Some("RS+NB+BP"));
    assert_eq!(find('U'), Some("KNN+Kmeans+RS+NB"));
    assert_eq!(find('Y'), Some("Kmeans+RS+NB+BP"));
    assert_eq!(w.iter().filter(|w| w.apps.len() == 2).count(), 10);
    assert_eq!(w.iter().filter(|w| w.apps.len() == 3).count(), 10);
    assert_eq!(w.iter().filter(|w| w.apps.len() == 4).count(), 5);
}

#[test]
fn profiles_agree_with_every_fact_the_paper_states() {
    let p = |name: &str| PROFILES.iter().find(|p| p.name == name).unwrap();
    let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
    assert_eq!(names, ["KNN", "Kmeans", "RS", "NB", "BP"]);
    // Read share of the GPU_base task: 82.8 %, 24.0 %, 53.9 %.
    for (name, share) in [("KNN", 0.828), ("Kmeans", 0.240), ("NB", 0.539)] {
        assert!((p(name).gpu_read_fraction() - share).abs() < 5e-4, "{name}");
    }
    // KNN and NB read 1 GB per GPU task; BP 4 MB, with ≈ 23.6 s of kernel.
    assert_eq!(p("KNN").split_mib, 1024);
    assert_eq!(p("NB").split_mib, 1024);
    assert_eq!(p("BP").split_mib, 4);
    assert_eq!(p("BP").gpu_compute_s, 23.6);
    // RS and BP read little: compute-bound.
    for name in ["RS", "BP"] {
        assert!(p(name).gpu_read_fraction() < 0.05, "{name}");
    }
    // Base read time = V / disk bandwidth, for both variants (consistent with the disk model).
    for prof in &PROFILES {
        let app = hdas_paper::application(prof, hetsched_core::AppId(0), 1.0);
        let read = prof.split_mib as f64 / DISK_MIB_S;
        let ns = hetsched_core::time::secs(read);
        assert_eq!(app.cpu.as_ref().unwrap().read, ns, "{}", prof.name);
        assert_eq!(app.gpu.as_ref().unwrap().read, ns, "{}", prof.name);
    }
}

#[test]
fn unknown_workloads_and_bad_scales_are_refused() {
    let opts = HdasPaperOptions {
        workloads: vec!['Z'],
        ..HdasPaperOptions::default()
    };
    let msg = hdas_paper::run(&opts, &mut |_| {}).unwrap_err().to_string();
    assert!(msg.contains("`Z`"), "{msg}");
    let opts = HdasPaperOptions {
        scale: 0.0,
        ..HdasPaperOptions::default()
    };
    assert!(hdas_paper::run(&opts, &mut |_| {}).is_err());
}

#[test]
fn workload_letters_are_taken_in_either_case() {
    // `sim accel-paper --kernels lu` was accepted while `sim hdas-paper --workloads a` was not.
    let opts = HdasPaperOptions {
        workloads: vec!['c'],
        ..HdasPaperOptions::default()
    };
    let report = hdas_paper::run(&opts, &mut |_| {}).expect("`c` is workload C");
    let letters: Vec<char> = report.workloads.iter().map(|w| w.letter).collect();
    assert_eq!(letters, ['C']);
}

/// The full experiment (scale 1, all 25 workloads; a few seconds even in a debug build): averaged
/// over the workloads, HDAS < Hadoop+'s model < FIFO < CPU-only in makespan, HDAS's tasks are less
/// delayed than FIFO's, and the two workloads the paper singles out behave as it says.
#[test]
fn the_papers_ordering_holds_on_average() {
    let report = hdas_paper::run(&HdasPaperOptions::default(), &mut |_| {}).unwrap();
    let a = &report.average.makespan_s;
    assert!(a.hdas < a.hadoop_model, "{a:?}");
    assert!(a.hadoop_model < a.fifo, "{a:?}");
    assert!(a.fifo < a.cpu_only, "{a:?}");
    let d = &report.average.delay;
    assert!(d.hdas < d.fifo, "{d:?}");
    let s = &report.average.speedup;
    assert!(
        s.hdas > s.hadoop_model && s.hadoop_model > s.fifo && s.fifo > 1.0,
        "{s:?}"
    );

    let row = |c: char| report.workloads.iter().find(|w| w.letter == c).unwrap();
    let c = row('C');
    // The paper: "≤ 2.8×" under every policy. FIFO and the model match it to one decimal; HDAS
    // does a little better here than in the paper (docs/results/hdas.md), but C stays disk-bound.
    for v in [c.speedup.fifo, c.speedup.hadoop_model] {
        assert!(v < 2.85, "C gains little: {v}");
    }
    assert!(
        c.speedup.hdas < 3.1,
        "C gains little under HDAS too: {}",
        c.speedup.hdas
    );
    assert!(
        c.delay.fifo > 2.5 && c.delay.hdas > 2.5,
        "C's tasks are ≈ 3× slower"
    );
    let i = row('I');
    for v in [i.speedup.fifo, i.speedup.hadoop_model, i.speedup.hdas] {
        assert!(v > 21.0, "I gains > 21×: {v}");
    }
    // The report renders and carries P's time series for every policy.
    let table = report.render_table();
    assert!(table.contains("KNN+NB+BP") && table.contains("paper"));
    assert_eq!(report.series.len(), 4);
    assert!(report.series.iter().all(|p| !p.series.is_empty()));
    assert_eq!(report.single_app.len(), 5);
}

#[test]
fn outputs_are_written() {
    let opts = HdasPaperOptions {
        scale: 0.02,
        workloads: vec!['C', 'P'],
        ..HdasPaperOptions::default()
    };
    let report = hdas_paper::run(&opts, &mut |_| {}).unwrap();
    let dir = ScratchDir::new("hdas-paper", "outputs");
    let written = report.write_outputs(&dir).unwrap();
    for name in [
        "report.json",
        "workloads.csv",
        "series_P.csv",
        "fig6_speedup.svg",
        "fig8_vs_fifo.svg",
        "fig9_task_delay.svg",
        "load_P_hdas.svg",
    ] {
        let path = dir.join(name);
        assert!(written.contains(&path), "{name}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.is_empty(), "{name}");
        if name.ends_with(".svg") {
            assert!(text.contains("<svg"), "{name}");
        }
    }
    let csv = std::fs::read_to_string(dir.join("workloads.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3);
}
