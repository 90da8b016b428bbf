"""The Forward bound kernel (:mod:`.source`) and its launches (:mod:`.launch`)."""
