"""The Viterbi filter kernel (:mod:`.source`) and its launches (:mod:`.launch`)."""
