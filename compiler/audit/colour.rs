//! A colour per decision, shared by the SVG map (`plot`) and the Graphviz
//! trees (`explain --format dot`) so that a setting looks the same in both.

use dyncc_tables::{Algo, Decision, Proto, Setting};

/// A colour per (algorithm, protocol): hue by algorithm, lightness by
/// protocol, so related settings look related.
fn colour(d: Decision) -> (f64, f64, f64) {
    let Decision::Force(Setting { algo, proto, .. }) = d else {
        return (0.0, 0.0, 0.86);
    };
    let h = match algo {
        Algo::Tree => 212.0,
        Algo::Ring => 28.0,
        Algo::CollNetDirect => 285.0,
        Algo::CollNetChain => 325.0,
        Algo::Nvls => 128.0,
        Algo::NvlsTree => 172.0,
        Algo::Pat => 355.0,
    };
    let l = match proto {
        Proto::LL => 0.66,
        Proto::LL128 => 0.50,
        Proto::Simple => 0.36,
    };
    (h, 0.72, l)
}

fn hsl_to_rgb((h, s, l): (f64, f64, f64)) -> (u8, u8, u8) {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = h / 60.0;
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let f = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    (f(r), f(g), f(b))
}

/// `#rrggbb` of a decision's colour.
pub fn colour_hex(d: Decision) -> String {
    let (r, g, b) = hsl_to_rgb(colour(d));
    format!("#{r:02x}{g:02x}{b:02x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_decisions_get_distinct_colours() {
        let mut seen = std::collections::HashSet::new();
        for a in Algo::ALL {
            for p in Proto::ALL {
                assert!(seen.insert(colour_hex(Decision::Force(Setting::new(a, p)))));
            }
        }
    }
}
