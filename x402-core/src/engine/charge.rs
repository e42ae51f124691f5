//! What an `upto` (or batch-settlement) call is charged after its handler.

use http::HeaderValue;

use crate::{
    meter::{self, Meter},
    money::AtomicAmount,
    VerifiedPayment,
};

/// The `upto` charge: the override header, else the meter, else the
/// ceiling; capped at the ceiling. `Err` for a malformed override.
pub(super) fn charge(
    payment: &VerifiedPayment,
    decimals: u8,
    meter: &Meter,
    overrides: Option<&HeaderValue>,
) -> Result<AtomicAmount, ()> {
    let ceiling = meter.ceiling();
    let reported = match overrides {
        Some(value) => {
            let parsed = value
                .to_str()
                .map_err(|_| ())
                .and_then(|v| meter::parse_override(v, ceiling, decimals).map_err(|_| ()));
            match parsed {
                Ok(a) => a,
                Err(()) => {
                    tracing::error!(
                        route = %payment.route,
                        "x402: malformed Settlement-Overrides; charging nothing and answering 500"
                    );
                    return Err(());
                }
            }
        }
        None => match meter.reported() {
            Some(a) => a,
            None => {
                tracing::debug!(route = %payment.route, "x402: upto handler reported no usage; charging the ceiling");
                ceiling
            }
        },
    };
    if reported > ceiling {
        tracing::warn!(
            route = %payment.route,
            reported = %reported,
            ceiling = %ceiling,
            "x402: upto usage above the ceiling; charging the ceiling"
        );
        return Ok(ceiling);
    }
    Ok(reported)
}
