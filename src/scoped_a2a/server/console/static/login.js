// The login form: posts the credential once; the server answers with a session cookie.
import { post } from "./api.js";

const form = document.getElementById("login");
const error = document.getElementById("login-error");

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  error.hidden = true;
  try {
    await post("login", { credential: document.getElementById("credential").value });
    window.location.reload();
  } catch (err) {
    error.textContent = err.message;
    error.hidden = false;
  }
});
