//! The write-ahead log of held keys (`lc-cli serve --data PATH`): to come.
