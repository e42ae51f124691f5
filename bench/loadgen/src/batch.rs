//! The load generator's batch-settlement buyers: one channel per
//! connection, its deposit and its vouchers signed before the clock starts.

use alloy_primitives::{Address, Bytes, B256};
use alloy_signer::SignerSync;
use http::HeaderValue;
use serde_json::{json, Value};
use x402_core::{
    batch::{eip712, ChannelConfig, BATCH_SETTLEMENT_ADDRESS},
    codec, network,
    proto::v2,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What a deposit asks for: enough for any run.
pub const DEPOSIT: u128 = 1_000_000_000_000;

/// One buyer's channel: the deposit (its first call) and the vouchers of the
/// calls after it, in order (cumulative `k × amount`, the example charging
/// the whole ceiling per call).
#[derive(Debug)]
pub struct Channel {
    /// The first call's payment.
    pub deposit: HeaderValue,
    /// The next calls' payments, in order.
    pub vouchers: Vec<HeaderValue>,
}

/// Signs `channels` channels of `calls` vouchers each (after the deposit)
/// for the route's batch requirement `req`; payer `i` is `payer(seed, i)`.
pub fn presign(
    req: &v2::PaymentRequirements,
    resource: &v2::ResourceInfo,
    channels: usize,
    calls: usize,
    seed: u64,
) -> Result<Vec<Channel>, Error> {
    let chain_id = network::evm_chain_id(&req.network).ok_or("not an EVM network")?;
    let domain = eip712::domain(chain_id, BATCH_SETTLEMENT_ADDRESS);
    let authorizer: Address = req
        .extra
        .get("receiverAuthorizer")
        .and_then(Value::as_str)
        .ok_or("the batch requirement names no receiverAuthorizer")?
        .parse()?;
    let delay = req
        .extra
        .get("withdrawDelay")
        .and_then(Value::as_u64)
        .unwrap_or(900);
    let price = u128::try_from(req.amount.get()).map_err(|_| "price above u128")?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = channels.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let domain = &domain;
                s.spawn(move || {
                    (t * per..((t + 1) * per).min(channels))
                        .map(|c| {
                            let key = crate::payer(seed, 1_000_000 + c as u64);
                            let config = ChannelConfig {
                                payer: key.address(),
                                payer_authorizer: key.address(),
                                receiver: req.pay_to.parse()?,
                                receiver_authorizer: authorizer,
                                token: req.asset.parse()?,
                                withdraw_delay: delay,
                                salt: B256::from(rand::random::<[u8; 32]>()),
                            };
                            let id = eip712::channel_id(&config, domain);
                            let signed = |max: u128| -> Result<Value, Error> {
                                let digest = eip712::voucher_digest(id, max, domain);
                                let sig = key.sign_hash_sync(&digest)?;
                                Ok(json!({
                                    "channelId": id,
                                    "maxClaimableAmount": max.to_string(),
                                    "signature": Bytes::from(sig.as_bytes().to_vec()),
                                }))
                            };
                            let header = |payload: Value| -> Result<HeaderValue, Error> {
                                Ok(HeaderValue::try_from(codec::encode(&json!({
                                    "x402Version": 2,
                                    "resource": resource,
                                    "accepted": req,
                                    "payload": payload,
                                }))?)?)
                            };
                            let deposit = header(json!({
                                "type": "deposit",
                                "channelConfig": config,
                                "voucher": signed(price)?,
                                "deposit": {
                                    "amount": DEPOSIT.to_string(),
                                    "authorization": { "erc3009Authorization": {
                                        "validAfter": "0", "validBefore": "99999999999",
                                        "salt": B256::ZERO, "signature": "0x00",
                                    } },
                                },
                            }))?;
                            let vouchers = (2..=calls as u128 + 1)
                                .map(|k| {
                                    header(json!({
                                        "type": "voucher",
                                        "channelConfig": config,
                                        "voucher": signed(k * price)?,
                                    }))
                                })
                                .collect::<Result<Vec<_>, Error>>()?;
                            Ok(Channel { deposit, vouchers })
                        })
                        .collect::<Result<Vec<_>, Error>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(channels);
        for h in handles {
            out.extend(h.join().map_err(|_| "a signing thread panicked")??);
        }
        Ok(out)
    })
}
