//! What a command prints on stderr while it samples, written by a thread of its own: a terminal
//! that reads slowly (its emulator or sshd starved by the profiled JVM's threads) blocks that
//! thread, never the sampling loop. A progress line written from the loop once stretched a
//! 10 s recording of a 3000-thread JVM to 30 s and lost 4,737 samples while it waited.

use std::io::Write;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

enum Message {
    /// A whole line, printed in order.
    Line(String),
    /// A progress text that replaces the previous one on the current line; only the newest
    /// waiting one is printed.
    Progress(String),
}

pub struct Console {
    sender: Option<Sender<Message>>,
    writer: Option<JoinHandle<()>>,
}

impl Console {
    pub fn start() -> Console {
        let (sender, receiver) = channel();
        let writer = std::thread::Builder::new()
            .name("jvmperf-stderr".into())
            .spawn(move || {
                crate::priority::take_own_nice();
                write_messages(receiver)
            })
            .ok();
        Console {
            sender: Some(sender),
            writer,
        }
    }

    pub fn line(&self, line: String) {
        self.send(Message::Line(line));
    }

    pub fn progress(&self, text: String) {
        self.send(Message::Progress(text));
    }

    fn send(&self, message: Message) {
        let Some(sender) = &self.sender else { return };
        if self.writer.is_none() {
            // No thread could be started: print here.
            write_batch(&mut std::io::stderr().lock(), vec![message], &mut false);
        } else {
            let _ = sender.send(message);
        }
    }

    /// Everything sent is printed, the progress line ended.
    pub fn finish(mut self) {
        self.close();
    }

    fn close(&mut self) {
        self.sender = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.close();
    }
}

fn write_messages(receiver: Receiver<Message>) {
    let mut on_progress_line = false;
    while let Ok(first) = receiver.recv() {
        let batch: Vec<Message> = std::iter::once(first).chain(receiver.try_iter()).collect();
        // Locked per batch, never while waiting: the rest of the program prints too.
        write_batch(&mut std::io::stderr().lock(), batch, &mut on_progress_line);
    }
    if on_progress_line {
        let _ = writeln!(std::io::stderr());
    }
}

/// Writes `batch`'s lines in order, and its last message if that is a progress text (the others
/// are out of date).
fn write_batch(out: &mut impl Write, batch: Vec<Message>, on_progress_line: &mut bool) {
    let last = batch.len().saturating_sub(1);
    for (i, message) in batch.into_iter().enumerate() {
        let _ = match message {
            Message::Line(line) => {
                let end_progress = if *on_progress_line { "\n" } else { "" };
                *on_progress_line = false;
                writeln!(out, "{end_progress}{line}")
            }
            Message::Progress(text) if i == last => {
                *on_progress_line = true;
                write!(out, "\r{text}")
            }
            Message::Progress(_) => Ok(()),
        };
    }
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(batches: Vec<Vec<Message>>) -> String {
        let mut out = Vec::new();
        let mut on_progress_line = false;
        for batch in batches {
            write_batch(&mut out, batch, &mut on_progress_line);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn only_the_newest_progress_is_written_and_lines_end_it() {
        use Message::*;
        let out = written(vec![
            vec![Progress("a".into()), Progress("b".into())],
            vec![Line("status".into()), Progress("c".into())],
            vec![Progress("d".into()), Line("x".into())],
        ]);
        assert_eq!(out, "\rb\nstatus\n\rc\nx\n");
    }
}
