"""The deliverable: bundle assembly (staging and atomic publish) and generated host stubs."""
