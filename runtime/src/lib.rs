//! The dyncc NCCL tuner plugin.
