"""The seed papers' schedulers, as their papers or code run them: MG-WFBP, OF-WFBP, P3,
ByteScheduler, iBatch and iPart, US-Byte and DeAR."""
