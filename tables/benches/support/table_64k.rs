//! The ~64 KiB table the load and first-init benchmarks use; shared by
//! `tables/benches/load.rs` and `runtime/benches/getcollinfo.rs` with
//! `#[path]`.

use dyncc_tables::{
    Algo, Basis, Coll, ContextSpec, Decision, Proto, RegBuff, Rule, Setting, TableBuilder,
};

/// 200 contexts (5 collectives x 40 node counts) of 24 rules each, plus
/// metadata: about 64 KiB.
pub fn table_64k() -> Vec<u8> {
    let mut b = TableBuilder::new();
    b.meta("platform", "bench")
        .meta("command", "benches/load.rs");
    for coll in Coll::ALL {
        for nodes in 1..=40u32 {
            let rules: Vec<Rule> = (0..24u32)
                .map(|i| Rule {
                    last_bucket: if i == 23 { 255 } else { (i * 10) as u8 },
                    decision: Decision::Force(
                        Setting::new(Algo::ALL[(i % 7) as usize], Proto::ALL[(i % 3) as usize])
                            .with_channels((i % 5) as u8),
                    ),
                    basis: Basis::Measured,
                    gain: 1.0 + i as f32 / 10.0,
                })
                .collect();
            let spec = ContextSpec {
                coll,
                nodes: (nodes, nodes),
                ppn: (1, 8),
                max_pipe_ops: 0,
                reg_buff: RegBuff::Any,
            };
            b.context(spec, &rules).unwrap();
        }
    }
    b.build().unwrap()
}
